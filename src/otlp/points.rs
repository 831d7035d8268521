//! The counters, gauges and histograms of `GET /metrics` as OpenTelemetry metrics
//! (docs/reference/opentelemetry.md, "Metrics"): read from the very text `/metrics`
//! serves, so the two cannot disagree. A counter is a monotonic cumulative Sum, a gauge
//! a Gauge, a histogram a cumulative Histogram (its buckets no longer cumulative, as
//! OTLP counts them); each series' labels are its point's attributes, and each metric
//! is named as its family is on `/metrics` (`egress_requests_total`).

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, Sum,
};

/// One family of the text: its name, help, type and samples (`name{labels} value`).
struct Family<'a> {
    name: &'a str,
    help: &'a str,
    kind: &'a str,
    samples: Vec<Sample<'a>>,
}

type Labels<'a> = Vec<(&'a str, String)>;

struct Sample<'a> {
    /// The sample's name after the family's (`_total`, `_bucket`, `_sum`, ...).
    suffix: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// The metrics in `text` (Prometheus text exposition), stamped `now`, counted since
/// `start` (both in nanoseconds since 1970). Lines it cannot read are skipped.
pub(super) fn metrics(text: &str, start: u64, now: u64) -> Vec<Metric> {
    families(text)
        .into_iter()
        .filter_map(|f| metric(f, start, now))
        .collect()
}

/// The points of `metric`, for counting what a failed export dropped.
pub(super) fn count(metric: &Metric) -> u64 {
    let n = match &metric.data {
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        _ => 0,
    };
    n as u64
}

fn families(text: &str) -> Vec<Family<'_>> {
    let mut out: Vec<Family<'_>> = Vec::new();
    let mut help = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, h)| h);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                out.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                });
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let Some(family) = out.last_mut() else {
                continue;
            };
            if let Some(sample) = sample(line, family.name) {
                family.samples.push(sample);
            }
        }
    }
    out
}

/// `name{a="x",b="y"} value` (label values with `\\`, `\"` and `\n` escapes).
fn sample<'a>(line: &'a str, family: &str) -> Option<Sample<'a>> {
    let name_end = line.find(['{', ' '])?;
    let suffix = line[..name_end].strip_prefix(family)?;
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key, value));
            rest = &after[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        suffix,
        labels,
        value,
    })
}

fn attributes(labels: &[(&str, String)]) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(k, v)| KeyValue {
            key: (*k).to_string(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(v.clone())),
            }),
            ..Default::default()
        })
        .collect()
}

fn number(value: f64) -> number_data_point::Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        number_data_point::Value::AsInt(value as i64)
    } else {
        number_data_point::Value::AsDouble(value)
    }
}

fn metric(family: Family<'_>, start: u64, now: u64) -> Option<Metric> {
    let points = |suffixes: &[&str]| -> Vec<NumberDataPoint> {
        family
            .samples
            .iter()
            .filter(|s| suffixes.contains(&s.suffix))
            .map(|s| NumberDataPoint {
                attributes: attributes(&s.labels),
                start_time_unix_nano: start,
                time_unix_nano: now,
                value: Some(number(s.value)),
                ..Default::default()
            })
            .collect()
    };
    let data = match family.kind {
        "counter" => Data::Sum(Sum {
            // The family is named with its `_total` (as `/metrics` names it) or without.
            data_points: points(&["", "_total"]),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        "gauge" => Data::Gauge(Gauge {
            data_points: points(&[""]),
        }),
        "histogram" => Data::Histogram(Histogram {
            data_points: histogram_points(&family.samples, start, now),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        }),
        _ => return None,
    };
    Some(Metric {
        name: family.name.to_string(),
        description: family.help.to_string(),
        data: Some(data),
        ..Default::default()
    })
}

/// One point per label set: the `_bucket` series (cumulative, by `le`) turned into
/// counts per bucket, with `_sum` and `_count`.
fn histogram_points(samples: &[Sample<'_>], start: u64, now: u64) -> Vec<HistogramDataPoint> {
    // Each label set's point, and the cumulative count of the buckets read so far.
    let mut points: Vec<(Labels<'_>, HistogramDataPoint, u64)> = Vec::new();
    for s in samples {
        let labels: Labels<'_> = s
            .labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .cloned()
            .collect();
        let at = match points.iter().position(|(l, _, _)| *l == labels) {
            Some(at) => at,
            None => {
                let point = HistogramDataPoint {
                    attributes: attributes(&labels),
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    ..Default::default()
                };
                points.push((labels, point, 0));
                points.len() - 1
            }
        };
        let (_, point, below) = &mut points[at];
        match s.suffix {
            "_sum" => point.sum = Some(s.value),
            "_count" => point.count = s.value as u64,
            "_bucket" => {
                let le = s.labels.iter().find(|(k, _)| *k == "le");
                let cumulative = s.value as u64;
                point.bucket_counts.push(cumulative.saturating_sub(*below));
                *below = cumulative;
                match le.map(|(_, v)| v.as_str()) {
                    Some("+Inf") | None => {}
                    Some(bound) => point
                        .explicit_bounds
                        .push(bound.parse().unwrap_or(f64::MAX)),
                }
            }
            _ => {}
        }
    }
    points.into_iter().map(|(_, p, _)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP egress_requests_total Plain HTTP requests.
# TYPE egress_requests_total counter
egress_requests_total{decision="allowed",reason="none"} 3
egress_requests_total{decision="denied",reason="host_not_allowed"} 2
# HELP egress_tunnels_active Tunnels.
# TYPE egress_tunnels_active gauge
egress_tunnels_active 1
# HELP egress_first_byte_seconds First byte.
# TYPE egress_first_byte_seconds histogram
egress_first_byte_seconds_sum 0.5
egress_first_byte_seconds_count 3
egress_first_byte_seconds_bucket{le="0.1"} 1
egress_first_byte_seconds_bucket{le="1.0"} 3
egress_first_byte_seconds_bucket{le="+Inf"} 3
# EOF
"#;

    #[test]
    fn counters_gauges_and_histograms_become_otlp_points() {
        let m = metrics(TEXT, 1, 2);
        assert_eq!(m.len(), 3);
        let Some(Data::Sum(sum)) = &m[0].data else {
            panic!("a sum")
        };
        assert!(sum.is_monotonic);
        assert_eq!(sum.data_points.len(), 2);
        assert_eq!(
            sum.data_points[1].value,
            Some(number_data_point::Value::AsInt(2))
        );
        assert_eq!(sum.data_points[1].attributes[1].key, "reason");
        let Some(Data::Gauge(g)) = &m[1].data else {
            panic!("a gauge")
        };
        assert_eq!(g.data_points.len(), 1);
        let Some(Data::Histogram(h)) = &m[2].data else {
            panic!("a histogram")
        };
        let p = &h.data_points[0];
        assert_eq!((p.count, p.sum), (3, Some(0.5)));
        assert_eq!(p.bucket_counts, vec![1, 2, 0]);
        assert_eq!(p.explicit_bounds, vec![0.1, 1.0]);
    }

    #[test]
    fn escaped_label_values_are_read_whole() {
        let text = "# TYPE x counter\nx_total{a=\"q\\\"u,o}te\"} 1\n";
        let m = metrics(text, 0, 0);
        let Some(Data::Sum(sum)) = &m[0].data else {
            panic!("a sum")
        };
        let v = &sum.data_points[0].attributes[0].value;
        let Some(AnyValue {
            value: Some(Value::StringValue(s)),
        }) = v
        else {
            panic!("a string")
        };
        assert_eq!(s, "q\"u,o}te");
    }
}
