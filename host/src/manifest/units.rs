//! The manifest's units: durations, CPU and byte quantities, as Kubernetes writes them.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

pub(super) fn de_opt_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_quantity(d).map(Some)
}

pub(super) fn de_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Int(n) => Ok(n),
        Raw::Text(t) => parse_quantity(&t).map_err(serde::de::Error::custom),
    }
}

/// A duration or quantity that does not parse; says what was given and what is expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnitError(String);

/// Parse a Go-style duration: `300ms`, `5s`, `1m30s`, `1.5h`. Units: ns, us, µs, ms, s, m, h.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    krec_core::duration::parse(text).map_err(UnitError)
}

pub(super) fn de_cpu<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Number(n) => Ok(n),
        Raw::Text(t) => parse_cpu(&t).map_err(serde::de::Error::custom),
    }
}

/// Parse a Kubernetes CPU quantity into cores: `500m`, `1`, `1.5`, `2000m`.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_cpu(text: &str) -> Result<f64, UnitError> {
    let bad = || {
        UnitError(format!(
            "invalid CPU quantity {text:?}: expected e.g. 500m, 1 or 1.5"
        ))
    };
    let t = text.trim();
    let (number, scale) = match t.strip_suffix('m') {
        Some(milli) => (milli, 1e-3),
        None => (t, 1.0),
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    Ok(value * scale)
}

/// Parse a Kubernetes quantity of bytes: `64Mi`, `1Gi`, `500M`, `1048576`.
///
/// # Errors
///
/// A [`UnitError`] saying what is expected.
pub fn parse_quantity(text: &str) -> Result<u64, UnitError> {
    let bad = || {
        UnitError(format!(
            "invalid quantity {text:?}: expected e.g. 64Mi, 1Gi or 500M"
        ))
    };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let mult: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}
