//! What kube-apiserver's printers (`pkg/printers/internalversion`) share: a Table's columns, a
//! row's readers and the texts kubectl shows (ages, selectors, lists). Each kind's columns and
//! row are its strategy's; the Table is the registry's (`registry::table`).

use serde_json::{Value, json};

use crate::scale::selector_string;
use krec_core::json::Pointer;

/// One column of a kind's Table: its name, type, format, description and priority (1 shows
/// with `-o wide`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// The header (`Name`, `Ready`, …).
    pub name: &'static str,
    /// `string` or `integer`.
    pub kind: &'static str,
    /// `name` for the name column, else empty.
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0, or 1 for the columns only `-o wide` shows.
    pub priority: u8,
}

impl Column {
    /// A string column shown by default.
    pub const fn text(name: &'static str) -> Self {
        Column {
            name,
            kind: "string",
            format: "",
            description: "",
            priority: 0,
        }
    }

    /// An integer column shown by default.
    pub const fn int(name: &'static str) -> Self {
        Column {
            kind: "integer",
            ..Column::text(name)
        }
    }

    /// The column shown only with `-o wide`.
    pub const fn wide(self) -> Self {
        Column {
            priority: 1,
            ..self
        }
    }

    /// The column's definition in a Table.
    pub fn definition(&self) -> Value {
        json!({"name": self.name, "type": self.kind, "format": self.format,
            "description": self.description, "priority": self.priority})
    }
}

/// The name column every kind's Table has.
pub const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};

/// The age column most kinds' Tables end with.
pub const AGE: Column = Column {
    name: "Age",
    kind: "string",
    format: "",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
    priority: 0,
};

/// The columns of a kind without a printer of its own.
pub const NAME_AGE: &[Column] = &[NAME, AGE];

/// An object being printed as a row, with the readers kube-apiserver's printers share.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// The object.
    pub object: &'a Value,
    /// When the Table is made (ages are counted to it).
    pub now: jiff::Timestamp,
}

impl<'a> Row<'a> {
    /// The string at `pointer`, or `""`.
    pub fn str(&self, pointer: &str) -> &'a str {
        self.object
            .at(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The integer at `pointer`, or 0.
    pub fn int(&self, pointer: &str) -> i64 {
        self.object.at(pointer).and_then(Value::as_i64).unwrap_or(0)
    }

    /// The name cell.
    pub fn name(&self) -> Value {
        json!(self.str("/metadata/name"))
    }

    /// The age cell.
    pub fn age(&self) -> Value {
        json!(self.age_of(self.object.at("/metadata/creationTimestamp")))
    }

    /// How long before [`now`](Self::now) an RFC 3339 time was, as kubectl shows ages.
    pub fn age_of(&self, time: Option<&Value>) -> String {
        age_since(time, self.now)
    }

    /// The container names and images of a workload's pod template, comma-separated.
    pub fn containers(&self) -> (String, String) {
        let containers = self
            .object
            .at("/spec/template/spec/containers")
            .or_else(|| {
                self.object
                    .at("/spec/jobTemplate/spec/template/spec/containers")
            })
            .and_then(Value::as_array);
        let field = |f: &str| {
            containers
                .into_iter()
                .flatten()
                .filter_map(|c| c.get(f).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(",")
        };
        (field("name"), field("image"))
    }

    /// A workload's `spec.selector` as selector text, or `<none>`.
    pub fn selector(&self) -> String {
        self.object
            .at("/spec/selector")
            .map(selector_string)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "<none>".into())
    }
}

/// A string map as `k=v,k2=v2` (a service's or node selector), or `<none>`.
pub fn map_text(map: Option<&Value>) -> String {
    map.and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|| "<none>".into())
}

/// At most three items and how many more, as kubectl's printers list endpoints
/// (`a,b,c + 2 more...`); `<none>` for none.
pub fn first_three(items: &[String]) -> String {
    match items.len() {
        0 => "<none>".to_owned(),
        n if n <= 3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

/// How long ago an RFC 3339 time was, as kubectl shows ages (`translateTimestampSince`).
pub(crate) fn age_since(time: Option<&Value>, now: jiff::Timestamp) -> String {
    let Some(then) = time
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return "<unknown>".into();
    };
    human_duration((now.as_second() - then.as_second()).max(0))
}

/// apimachinery's `duration.HumanDuration`: `45s`, `5m12s`, `47m`, `3h20m`, `30h`, `5d3h`,
/// `300d`, `2y15d`, `9y`.
pub fn human_duration(seconds: i64) -> String {
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 60 * 2 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 60 * 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if years < 8 {
        match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        }
    } else {
        format!("{years}y")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_should_read_as_kubectl_shows_them() {
        for (seconds, text) in [
            (45, "45s"),
            (119, "119s"),
            (312, "5m12s"),
            (300, "5m"),
            (47 * 60, "47m"),
            (3 * 3600 + 20 * 60, "3h20m"),
            (30 * 3600, "30h"),
            (5 * 86400 + 3 * 3600, "5d3h"),
            (300 * 86400, "300d"),
            (2 * 365 * 86400 + 15 * 86400, "2y15d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }
}
