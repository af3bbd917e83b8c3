//! Durations as Kubernetes tools write them, Go's `time.ParseDuration`: `300ms`, `5s`, `1m30s`,
//! `1.5h` (units `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`). One parser for the protobuf decoder
//! (`metav1.Duration`), the manifest, the command line and the simulation's annotations.

use std::time::Duration;

/// A Go duration in nanoseconds (signed, as `time.Duration`; beyond its ±292 years, an error).
pub fn parse_nanos(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a duration");
    let (negative, seconds) = seconds(text).ok_or_else(bad)?;
    let nanos = seconds * 1e9;
    if nanos > 9.2e18 {
        return Err(bad());
    }
    #[allow(clippy::cast_possible_truncation)]
    let nanos = nanos.round() as i64;
    Ok(if negative { -nanos } else { nanos })
}

/// A non-negative Go duration (surrounding spaces allowed; longer than `time.Duration` holds is
/// fine), with an error saying what is expected.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?}: expected e.g. 500ms, 5s, 10m or 1h30m");
    match seconds(text.trim()) {
        Some((false, seconds)) => Duration::try_from_secs_f64(seconds).map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// The sign and the length in seconds of a Go duration's text.
fn seconds(text: &str) -> Option<(bool, f64)> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some((negative, 0.0));
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[end..];
    }
    total.is_finite().then_some((negative, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_should_parse() {
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse(" 500ms "), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse_nanos("-1.5s"), Ok(-1_500_000_000));
        for bad in ["", "5", "5x", "-1s", "1e400h"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            parse_nanos("99999999999999h").is_err(),
            "beyond time.Duration"
        );
        assert!(parse("100000000h").is_ok(), "a Duration holds it");
        assert_eq!(
            parse("soon").expect_err("not a duration"),
            "invalid duration \"soon\": expected e.g. 500ms, 5s, 10m or 1h30m"
        );
    }
}
