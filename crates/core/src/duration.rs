//! Durations as people write them in configuration and in control planes: `500ms`, `30s`,
//! `1.5s`, `5m`, `1h30m` (Go's notation for the units kalypso needs), or a bare number of
//! seconds. One parser for the daemon's and operator's settings, the CLI's flags and a
//! SchedulerExtender's `timeout`; pure, like the rest of the core.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses `text` (`500ms`, `30s`, `1.5s`, `5m`, `2h`, `1h30m`, `45`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number at {rest:?}"
            ));
        }
        let value: f64 = rest[..digits]
            .parse()
            .map_err(|e| format!("invalid duration {text:?}: {e}"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            unit => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)"
                ));
            }
        };
        let part = Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("invalid duration {text:?}: out of range"))?;
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// Formats `d` the way [`parse`] reads it (`1m30s`, `250ms`).
pub fn format(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.is_zero() {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// `#[serde(deserialize_with = "kalypso_core::duration::deserialize")]` for `Duration` fields.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Secs(s) => Ok(Duration::from_secs(s)),
        Raw::Text(t) => parse(&t).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2m5s"), Ok(Duration::from_secs(125)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse("1.2.3s").is_err());
        assert!(parse("5 minutes").is_err());
        assert!(parse("m").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for text in ["250ms", "1h30m", "45s", "2m5s", "0ms"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
