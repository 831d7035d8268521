//! What the OpenTelemetry export needs of a request beyond its audit record
//! (docs/reference/opentelemetry.md, "Traces"): when it started and the client's W3C
//! `traceparent`, carried beside the record but never written into the file (the
//! record's fields are section 7's).

use std::time::SystemTime;

/// A request's start and its client's trace context, read only while `--otlp-endpoint`
/// is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Trace {
    pub start: SystemTime,
    pub parent: Option<TraceParent>,
}

/// A W3C Trace Context `traceparent`: the trace, the caller's span and its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl Trace {
    /// Now, under the `traceparent` header's value if there is one that parses.
    pub(crate) fn starting(traceparent: Option<&[u8]>) -> Trace {
        Trace {
            start: SystemTime::now(),
            parent: traceparent.and_then(TraceParent::parse),
        }
    }
}

impl TraceParent {
    /// `version-traceid-parentid-flags`, lower-case hex. Version `ff`, an all-zero
    /// trace or span id, and a version-00 value with anything after the flags are
    /// invalid: the span then starts a trace of its own. A later version may add fields
    /// after the flags, behind a `-`.
    pub(crate) fn parse(value: &[u8]) -> Option<TraceParent> {
        if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let version = hex::<1>(&value[..2])?[0];
        let rest = &value[55..];
        if version == 0xff
            || (version == 0 && !rest.is_empty())
            || rest.first().is_some_and(|&b| b != b'-')
        {
            return None;
        }
        let trace_id = hex::<16>(&value[3..35])?;
        let span_id = hex::<8>(&value[36..52])?;
        let flags = hex::<1>(&value[53..55])?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }
}

/// `2 * N` lower-case hex digits as `N` bytes.
fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_version_00_traceparent_parses() {
        let p = TraceParent::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(p.trace_id[0], 0x4b);
        assert_eq!(p.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(p.flags, 1);
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abc";
        assert!(TraceParent::parse(later.as_bytes()).is_some());
    }
}
