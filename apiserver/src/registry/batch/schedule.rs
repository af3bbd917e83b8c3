//! A CronJob's schedule checked as kube-apiserver checks it: `cron.ParseStandard` of
//! robfig/cron v3 (five fields, or a descriptor such as `@hourly` or `@every 1h`), with its
//! error messages.

/// One field's bounds and names.
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
/// Month names, January first (numbered from 1).
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Day names, Sunday first (numbered from 0).
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// Why `spec` is not a schedule, in robfig/cron's words; `None` when it is one.
pub(crate) fn problem(spec: &str) -> Option<String> {
    if spec.is_empty() {
        return Some("empty spec string".into());
    }
    // A time zone prefix (`CRON_TZ=…` or `TZ=…`) is the parser's; kube then refuses it apart.
    let mut rest = spec;
    if rest.starts_with("TZ=") || rest.starts_with("CRON_TZ=") {
        let end = rest.find(' ').unwrap_or(rest.len());
        rest = rest[end..].trim();
    }
    if rest.starts_with('@') {
        return descriptor(rest);
    }
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() != 5 {
        return Some(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let bounds = [&MINUTES, &HOURS, &DAYS_OF_MONTH, &MONTHS, &DAYS_OF_WEEK];
    fields
        .iter()
        .zip(bounds)
        .find_map(|(field, bounds)| field.split(',').find_map(|r| range(r, bounds)))
}

fn descriptor(spec: &str) -> Option<String> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            None
        }
        _ => match spec.strip_prefix("@every ") {
            Some(duration) => go_duration_problem(duration)
                .map(|p| format!("failed to parse duration {spec}: {p}")),
            None => Some(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// Why Go's `time.ParseDuration` refuses `text`, roughly: a sequence of numbers each with a
/// unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`).
fn go_duration_problem(text: &str) -> Option<String> {
    let quoted = format!("time: invalid duration {:?}", text);
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if body == "0" {
        return None;
    }
    if body.is_empty() {
        return Some(quoted);
    }
    let mut rest = body;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 || rest[..digits].chars().all(|c| c == '.') {
            return Some(quoted);
        }
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        match &rest[..unit] {
            "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h" => {}
            "" => return Some(format!("time: missing unit in duration {:?}", text)),
            other => {
                return Some(format!(
                    "time: unknown unit {other:?} in duration {:?}",
                    text
                ));
            }
        }
        rest = &rest[unit..];
    }
    None
}

/// robfig/cron's `getRange`: `*`, `?`, `N`, `N-M`, with an optional `/STEP`.
fn range(expr: &str, bounds: &Bounds) -> Option<String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end) = if matches!(low_and_high[0], "*" | "?") {
        (bounds.min, bounds.max)
    } else {
        let start = match number_or_name(low_and_high[0], bounds) {
            Ok(n) => n,
            Err(e) => return Some(e),
        };
        let end = match low_and_high.len() {
            1 => start,
            2 => match number_or_name(low_and_high[1], bounds) {
                Ok(n) => n,
                Err(e) => return Some(e),
            },
            _ => return Some(format!("too many hyphens: {expr}")),
        };
        (start, end)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = match number(range_and_step[1]) {
                Ok(n) => n,
                Err(e) => return Some(e),
            };
            // `N/step` means N through the maximum.
            if single {
                end = bounds.max;
            }
            step
        }
        _ => return Some(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Some(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Some(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Some(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Some(format!("step of range should be a positive number: {expr}"));
    }
    None
}

fn number_or_name(text: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = text.to_lowercase();
    if let Some(at) = bounds.names.iter().position(|n| *n == lower) {
        // Day names count from 0, month names from 1.
        let at = u32::try_from(at).unwrap_or(0);
        return Ok(at + bounds.min);
    }
    number(text)
}

/// robfig/cron's `mustParseInt`: Go's `strconv.Atoi`, then no negative numbers.
fn number(text: &str) -> Result<u32, String> {
    let invalid = || {
        format!("failed to parse int from {text}: strconv.Atoi: parsing {text:?}: invalid syntax")
    };
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let value: i64 = text.parse().map_err(|_| {
        format!(
            "failed to parse int from {text}: strconv.Atoi: parsing {text:?}: value out of range"
        )
    })?;
    if value < 0 {
        return Err(format!("negative number ({value}) not allowed: {text}"));
    }
    u32::try_from(value).map_err(|_| {
        format!(
            "failed to parse int from {text}: strconv.Atoi: parsing {text:?}: value out of range"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::problem;

    #[test]
    fn schedules_should_be_judged_as_robfig_cron_judges_them() {
        for good in [
            "*/5 * * * *",
            "0 0 * * 0",
            "15 3 1-15/2 jan-jun mon,wed,FRI",
            "@hourly",
            "@every 1h30m",
            "0 9 * * ?",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
        for (bad, message) in [
            (
                "every minute",
                "expected exactly 5 fields, found 2: [every minute]",
            ),
            ("", "empty spec string"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
            (
                "5-1 * * * *",
                "beginning of range (5) beyond end of range (1): 5-1",
            ),
            (
                "*/0 * * * *",
                "step of range should be a positive number: */0",
            ),
            ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
            (
                "x * * * *",
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
            ),
            ("@often", "unrecognized descriptor: @often"),
        ] {
            assert_eq!(problem(bad).as_deref(), Some(message), "{bad:?}");
        }
    }
}
