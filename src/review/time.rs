//! RFC 3339 timestamps to and from milliseconds since the Unix epoch: what the audit
//! record's `ts` and `--since` need. The `time` crate reads them and does the calendar.

use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, PrimitiveDateTime};

/// `2026-11-29T10:01:02.345Z` or with an offset (`+02:00`); `None` when malformed.
///
/// Date and time are parted by `T`, `t` or a space, and `Z` may be `z`. Any number of
/// fraction digits is read, down to the millisecond. A leap second (`:60`, only in the
/// last minute of a month, UTC) reads as the millisecond before the next minute.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    // The crate takes any byte between date and time; keep to the three RFC 3339 names.
    if !matches!(s.as_bytes().get(10), Some(b'T' | b't' | b' ')) {
        return None;
    }
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

/// `2026-11-29T10:01:00Z` (whole seconds, UTC).
pub fn format_utc(millis: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp(millis.div_euclid(1000)).unwrap_or_else(|_| {
        // Only parsed timestamps and the buckets between them come here, all in range.
        let bound = if millis < 0 {
            PrimitiveDateTime::MIN
        } else {
            PrimitiveDateTime::MAX
        };
        bound.assume_utc()
    });
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_and_refuses_garbage() {
        #[rustfmt::skip]
        let cases: &[(&str, Option<i64>)] = &[
            ("1970-01-01T00:00:00Z",          Some(0)),
            ("2026-11-29T10:01:02.345Z",      Some(1_795_946_462_345)),
            ("2026-11-29T12:01:02.345+02:00", Some(1_795_946_462_345)),
            ("2000-02-29T00:00:00Z",          Some(951_782_400_000)),
            ("2026-11-29 10:01:02Z",          Some(1_795_946_462_000)),
            ("2026-11-29t10:01:02.345z",      Some(1_795_946_462_345)),
            ("2026-11-29T05:01:02.3456-05:00", Some(1_795_946_462_345)),
            ("2026-11-29T10:01:02.3Z",        Some(1_795_946_462_300)),
            ("2026-11-30T23:59:60Z",          Some(1_796_083_199_999)),
            ("2026-11-29X10:01:02Z",          None),
            ("2026-02-30T00:00:00Z",          None),
            ("2026-13-01T00:00:00Z",          None),
            ("2026-11-29T10:01:02",           None),
            ("yesterday",                     None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_rfc3339(s), *want, "{s}");
        }
        assert_eq!(format_utc(1_795_946_462_345), "2026-11-29T10:01:02Z");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(951_868_800_000), "2000-03-01T00:00:00Z");
        assert_eq!(format_utc(-1000), "1969-12-31T23:59:59Z");
    }
}
