//! Recordings: a guest's reconciles as JSON lines — a [`Header`] line, then one
//! [`Reconcile`] per line — what `krec record` writes and `krec replay` reads.
//!
//! A Secret's `data` and `stringData` values read as `REDACTED` (their keys kept) unless the
//! recording was asked to include them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use super::tape::{Answer, Json, KindName, Reconcile};
use crate::manifest::Manifest;

/// What a recording's first line says: the format, the guest and what it ran with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// `krec.dev/recording/v1`.
    pub recording: String,
    /// The guest.
    pub guest: String,
    /// The module recorded, as the manifest names it.
    pub module: String,
    /// Its digest.
    pub digest: String,
    /// Its `spec.config` (defaults filled in).
    #[serde(default)]
    pub config: Option<Value>,
    /// Its `spec.permissions`, as the manifest writes them.
    #[serde(default)]
    pub permissions: Vec<Value>,
    /// Its `spec.for`, `{apiVersion, kind}`.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_kind: Option<Value>,
    /// When the recording started, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Whether Secrets' values are in it.
    #[serde(default)]
    pub secrets_included: bool,
}

/// The format a recording's header names.
pub const FORMAT: &str = "krec.dev/recording/v1";

impl Header {
    /// The header of a recording of `manifest`'s guest running a module of `digest`.
    pub fn of(manifest: &Manifest, digest: &str, secrets_included: bool) -> Self {
        Header {
            recording: FORMAT.into(),
            guest: manifest.name.clone(),
            module: manifest.spec.module.display().to_string(),
            digest: digest.to_owned(),
            config: manifest.spec.config.clone(),
            permissions: manifest
                .spec
                .permissions
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "apiVersion": p.api_version,
                        "kind": p.kind,
                        "verbs": p.verbs.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        "namespaces": p.namespaces,
                    })
                })
                .collect(),
            for_kind: manifest
                .spec
                .for_kind
                .as_ref()
                .map(|k| serde_json::json!({"apiVersion": k.api_version, "kind": k.kind})),
            started_ms: super::tape::now_ms(),
            secrets_included,
        }
    }
}

/// The last line of a recording: how many reconciles it holds and how many it missed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trailer {
    /// Reconciles written.
    pub reconciles: u64,
    /// Reconciles not written: the reader fell behind.
    pub dropped: u64,
    /// Why the recording ended.
    pub ended: String,
}

/// One line of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Line {
    /// The first.
    Header(Header),
    /// A reconcile.
    Reconcile(Box<Reconcile>),
    /// The last.
    End(Trailer),
}

const REDACTED: &str = "REDACTED";

fn is_secret(kind: &KindName) -> bool {
    kind.api_version == "v1" && kind.kind == "Secret"
}

/// The annotation `kubectl apply` keeps the whole object in (a Secret's values too).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Secret's (or a patch of one's) values redacted: `data` and `stringData` values, JSON
/// patch operations' values under them, and the last applied configuration.
fn redact_value(object: &mut Value) {
    if let Some(ops) = object.as_array_mut() {
        for op in ops {
            let path = op["path"].as_str().unwrap_or_default();
            let under = ["/data", "/stringData", "/metadata/annotations"]
                .iter()
                .any(|p| path.starts_with(p));
            if under && let Some(value) = op.get_mut("value") {
                *value = Value::String(REDACTED.into());
            }
        }
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(map) = object.get_mut(field).and_then(Value::as_object_mut) {
            for value in map.values_mut() {
                *value = Value::String(REDACTED.into());
            }
        }
    }
    if let Some(annotation) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.get_mut(LAST_APPLIED))
    {
        *annotation = Value::String(REDACTED.into());
    }
}

fn redact_json(json: &mut Json) {
    let mut value = json.value();
    redact_value(&mut value);
    json.0 = Arc::from(value.to_string());
}

fn redact_answer(answer: &mut Answer) {
    match answer {
        Answer::Object(json) => redact_json(json),
        Answer::Items(items) => items.iter_mut().for_each(redact_json),
        Answer::Namespaced(_) | Answer::Error(_) => {}
    }
}

/// `reconcile` with every Secret's values redacted.
pub fn redact(reconcile: &mut Reconcile) {
    for read in &mut reconcile.tape.reads {
        if is_secret(read.call.kind()) {
            redact_answer(&mut read.answer);
        }
    }
    for write in &mut reconcile.tape.writes {
        if is_secret(&write.kind) {
            redact_json(&mut write.body);
            redact_answer(&mut write.answer);
        }
    }
}

/// A recording in progress: where a guest's workers send each reconcile's line.
#[derive(Debug)]
pub struct Sink {
    lines: mpsc::Sender<String>,
    secrets_included: bool,
    dropped: AtomicU64,
    seq: AtomicU64,
}

/// Lines waiting for the recording's reader; past this, reconciles are dropped (counted in
/// the trailer).
pub const SINK_QUEUE: usize = 4096;

impl Sink {
    /// A sink and the receiving end of its lines.
    pub fn new(secrets_included: bool) -> (Arc<Self>, mpsc::Receiver<String>) {
        let (lines, receiver) = mpsc::channel(SINK_QUEUE);
        (
            Arc::new(Sink {
                lines,
                secrets_included,
                dropped: AtomicU64::new(0),
                seq: AtomicU64::new(0),
            }),
            receiver,
        )
    }

    /// Write `reconcile` (numbered in this recording, redacted unless asked otherwise).
    pub fn push(&self, mut reconcile: Reconcile) {
        reconcile.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        if !self.secrets_included {
            redact(&mut reconcile);
        }
        let line = match serde_json::to_string(&Line::Reconcile(Box::new(reconcile))) {
            Ok(line) => line,
            Err(err) => {
                tracing::warn!("a reconcile could not be recorded: {err}");
                return;
            }
        };
        if self.lines.try_send(line).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count a reconcile not written (its tape was cut at its size bound).
    pub fn drop_one(&self) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Reconciles dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The recording a guest's workers write to, if one runs: read without a lock, as every
/// reconcile looks.
#[derive(Debug, Default)]
pub struct Slot(arc_swap::ArcSwapOption<Sink>);

impl Slot {
    /// The sink, while a recording runs.
    pub fn sink(&self) -> Option<Arc<Sink>> {
        self.0.load_full()
    }

    /// Start writing to `sink`; `false` when a recording already runs.
    pub fn start(&self, sink: Arc<Sink>) -> bool {
        let previous = self.0.compare_and_swap(&None::<Arc<Sink>>, Some(sink));
        previous.is_none()
    }

    /// Stop the recording.
    pub fn stop(&self) {
        self.0.store(None);
    }
}

/// The longest line a recording may hold: a reconcile's tape is cut at
/// [`MAX_TAPE_BYTES`](super::tape::MAX_TAPE_BYTES), so krec never writes a longer one (twice
/// that for JSON's escapes, and a mebibyte for the rest of the line).
pub const MAX_LINE_BYTES: usize = 2 * super::tape::MAX_TAPE_BYTES + (1 << 20);

/// Why a recording cannot be read, naming the line.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// A header of another format.
    #[error("line {line}: recording format {found:?}, this krec reads {FORMAT:?}")]
    Format {
        /// The line.
        line: usize,
        /// The format it names.
        found: String,
    },
    /// The first line is not a header.
    #[error("line {line}: not a recording's header: not a krec recording")]
    NoHeader {
        /// The line.
        line: usize,
    },
    /// Nothing but blank lines.
    #[error("no header line: not a krec recording")]
    Empty,
    /// A header after the first line.
    #[error("line {line}: a second header: not one krec recording")]
    SecondHeader {
        /// The line.
        line: usize,
    },
    /// The input could not be read.
    #[error("line {line}: {error}")]
    Read {
        /// The line being read.
        line: usize,
        /// Why.
        error: std::io::Error,
    },
    /// A line longer than krec writes.
    #[error(
        "line {line}: longer than {} MiB, which no krec recording's line is (a reconcile's tape is at most {} MiB)",
        MAX_LINE_BYTES >> 20,
        super::tape::MAX_TAPE_BYTES >> 20
    )]
    TooLong {
        /// The line.
        line: usize,
    },
    /// A line that is no line of a recording.
    #[error("line {line}: not a line of a krec recording: {error}")]
    Parse {
        /// The line.
        line: usize,
        /// Why it does not parse.
        error: serde_json::Error,
    },
}

/// A recording read a line at a time: its header first, then one reconcile at a time, so that
/// reading a recording of any length holds one line in memory, and a line longer than any krec
/// writes ([`MAX_LINE_BYTES`]) is refused rather than read.
pub struct Reader<R> {
    input: R,
    /// The number of the last line read.
    line: usize,
}

impl<R: std::io::BufRead> Reader<R> {
    /// Read the header (the first line that is not blank).
    ///
    /// # Errors
    ///
    /// When the first line is not a krec recording's header, names the line.
    pub fn open(input: R) -> Result<(Header, Self), RecordingError> {
        let mut reader = Reader { input, line: 0 };
        match reader.next_line()? {
            Some(Line::Header(header)) if header.recording == FORMAT => Ok((header, reader)),
            Some(Line::Header(header)) => Err(RecordingError::Format {
                line: reader.line,
                found: header.recording,
            }),
            Some(_) => Err(RecordingError::NoHeader { line: reader.line }),
            None => Err(RecordingError::Empty),
        }
    }

    /// The next reconcile; `None` at the end of the recording (its trailer, or the input's end).
    ///
    /// # Errors
    ///
    /// A line that is not part of a recording, or too long to be one, by number.
    pub fn next_reconcile(&mut self) -> Result<Option<Reconcile>, RecordingError> {
        match self.next_line()? {
            Some(Line::Reconcile(reconcile)) => Ok(Some(*reconcile)),
            Some(Line::End(_)) | None => Ok(None),
            Some(Line::Header(_)) => Err(RecordingError::SecondHeader { line: self.line }),
        }
    }

    /// The next line that is not blank, parsed.
    fn next_line(&mut self) -> Result<Option<Line>, RecordingError> {
        use std::io::{BufRead as _, Read as _};
        loop {
            let mut bytes = Vec::new();
            let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX) + 1;
            let read = (&mut self.input)
                .take(limit)
                .read_until(b'\n', &mut bytes)
                .map_err(|error| RecordingError::Read {
                    line: self.line + 1,
                    error,
                })?;
            if read == 0 {
                return Ok(None);
            }
            self.line += 1;
            if bytes.len() > MAX_LINE_BYTES {
                return Err(RecordingError::TooLong { line: self.line });
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return serde_json::from_slice(&bytes).map(Some).map_err(|error| {
                RecordingError::Parse {
                    line: self.line,
                    error,
                }
            });
        }
    }
}

/// Parse a whole recording's text: its header and reconciles (see [`Reader`] to read one of any
/// length).
///
/// # Errors
///
/// The line that is not part of a recording, by number.
pub fn parse(text: &str) -> Result<(Header, Vec<Reconcile>), RecordingError> {
    let (header, mut reader) = Reader::open(text.as_bytes())?;
    let mut reconciles = Vec::new();
    while let Some(reconcile) = reader.next_reconcile()? {
        reconciles.push(reconcile);
    }
    Ok((header, reconciles))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::tape::{Outcome, Read, ReadCall, Tape};
    use serde_json::json;

    /// A crafted recording is read a line at a time: a line longer than krec writes is refused
    /// by number without being read whole, and a long one is never held at once.
    #[test]
    fn a_line_longer_than_krec_writes_should_be_refused_without_reading_it() {
        let header = serde_json::json!({"header": {"recording": FORMAT, "guest": "g",
            "module": "m.wasm", "digest": "sha256:aa", "startedMs": 0}});
        let reconcile = serde_json::json!({"reconcile": {"seq": 1, "name": "a", "clockMs": 0,
            "tape": {}, "outcome": "done"}});
        // 100 MB of one line, produced as it is read: never in memory as a whole.
        struct Endless {
            head: std::io::Cursor<Vec<u8>>,
            left: usize,
        }
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.head.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                let n = buf.len().min(self.left);
                buf[..n].fill(b' ');
                self.left -= n;
                Ok(n)
            }
        }
        let head = format!("{header}\n{reconcile}\n[");
        let input = std::io::BufReader::new(Endless {
            head: std::io::Cursor::new(head.into_bytes()),
            left: 100 << 20,
        });
        let (header, mut reader) = Reader::open(input).expect("the header");
        assert_eq!(header.guest, "g");
        let first = reader.next_reconcile();
        assert!(matches!(&first, Ok(Some(r)) if r.name == "a"), "{first:?}");
        let err = reader
            .next_reconcile()
            .expect_err("a 100 MB line")
            .to_string();
        assert!(err.starts_with("line 3: longer than 33 MiB"), "{err}");
        // Not a recording at all: said at its first line.
        let err = Reader::open("{\"x\": 1}\n".as_bytes())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "line 1: not a line of a krec recording: unknown variant `x`, expected one of `header`, `reconcile`, `end` at line 1 column 4"
            )
        );
    }

    #[test]
    fn secrets_should_be_redacted_and_a_recording_should_read_back() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "default"},
            "data": {"password": "aHVudGVyMg=="}});
        let read = Read {
            call: ReadCall::Get {
                kind: KindName {
                    api_version: "v1".into(),
                    kind: "Secret".into(),
                },
                namespace: Some("default".into()),
                name: "db".into(),
            },
            answer: Answer::Object(Json::of(&secret)),
        };
        let reconcile = Reconcile {
            seq: 0,
            namespace: Some("default".into()),
            name: "app".into(),
            clock_ms: 1_764_000_000_000,
            tape: Tape {
                reads: vec![read],
                ..Tape::default()
            },
            outcome: Outcome::RequeueAfter(5000),
        };
        let (sink, mut lines) = Sink::new(false);
        sink.push(reconcile.clone());
        let line = lines.try_recv().expect("a line");
        assert!(!line.contains("aHVudGVyMg=="), "{line}");
        assert!(line.contains("\"password\":\"REDACTED\""), "{line}");
        let header = serde_json::json!({"header": {"recording": FORMAT, "guest": "g",
            "module": "m.wasm", "digest": "sha256:aa", "startedMs": 0}});
        let (header, reconciles) = parse(&format!("{header}\n{line}\n")).expect("parse");
        assert_eq!(header.guest, "g");
        assert_eq!(reconciles.len(), 1);
        assert_eq!(reconciles[0].seq, 1);
        assert_eq!(reconciles[0].outcome, Outcome::RequeueAfter(5000));
        let (included, mut lines) = Sink::new(true);
        included.push(reconcile);
        assert!(lines.try_recv().expect("a line").contains("aHVudGVyMg=="));
        let mut patched = Reconcile {
            seq: 0,
            namespace: Some("default".into()),
            name: "app".into(),
            clock_ms: 0,
            tape: Tape::default(),
            outcome: Outcome::Done,
        };
        let secret_gvk = krec_core::Gvk::new("", "v1", "Secret");
        let mut with_last_applied = secret.clone();
        with_last_applied["metadata"]["annotations"] =
            json!({LAST_APPLIED: "{\"data\":{\"password\":\"aHVudGVyMg==\"}}"});
        patched.tape.writes = vec![
            crate::rollout::tape::patch_write(
                &secret_gvk,
                Some("default"),
                "db",
                krec_core::PatchType::Merge,
                &json!({"data": {"password": "aHVudGVyMg=="}}),
                false,
                Answer::Object(Json::of(&with_last_applied)),
            ),
            crate::rollout::tape::patch_write(
                &secret_gvk,
                Some("default"),
                "db",
                krec_core::PatchType::Json,
                &json!([{"op": "replace", "path": "/data/password", "value": "aHVudGVyMg=="}]),
                false,
                Answer::Object(Json::of(&secret)),
            ),
        ];
        let (sink, mut lines) = Sink::new(false);
        sink.push(patched);
        let line = lines.try_recv().expect("a line");
        assert!(!line.contains("aHVudGVyMg"), "{line}");
        let err = parse("{\"nonsense\": 1}\n")
            .expect_err("not a recording")
            .to_string();
        assert!(
            err.starts_with("line 1: not a line of a krec recording"),
            "{err}"
        );
    }
}
