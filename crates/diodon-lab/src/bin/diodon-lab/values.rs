//! Parsers of flag values shared by the subcommands (clap `value_parser`).
//! A leaf module, so `args` and the subcommand modules that own their flags
//! (`relay`, `deltat`, …) use it without importing each other.

/// `50ms`, `2s`, `1.5s`, `250us`, `0`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad duration '{s}'"))?;
    let secs = match unit {
        "" if v == 0.0 => 0.0,
        "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        _ => return Err(format!("bad duration '{s}': use s, ms or us")),
    };
    std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration '{s}': {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
