//! Which traces are recorded: the samplers of the OpenTelemetry specification, named as its
//! `OTEL_TRACES_SAMPLER` variable names them. The decision is made once per span when it starts
//! and travels in the W3C `sampled` flag, so a trace the gateway dropped is dropped by the
//! executor and the model provider too (with the default, parent-based samplers).

use super::TraceContext;

/// A sampling rule. The default is `parentbased_always_on`, the specification's default: follow
/// the parent's `sampled` flag, record every new trace.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// Records this fraction (0 ..= 1) of traces, decided from the trace id alone, so every
    /// process that sees the trace decides alike.
    TraceIdRatio(f64),
    /// Follows the parent's `sampled` flag; a span without a parent asks the root sampler.
    ParentBased(Box<Sampler>),
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
    }
}

impl Sampler {
    /// The sampler `name` (an `OTEL_TRACES_SAMPLER` value) with its argument (the ratio of the
    /// `traceidratio` samplers, `OTEL_TRACES_SAMPLER_ARG`; 1.0 when absent). Unknown names and
    /// ratios outside 0 ..= 1 are refused rather than silently recording everything.
    pub fn parse(name: &str, arg: Option<&str>) -> Result<Sampler, String> {
        let ratio = || match arg.map(str::trim).filter(|arg| !arg.is_empty()) {
            None => Ok(1.0),
            Some(arg) => arg
                .parse::<f64>()
                .ok()
                .filter(|ratio| (0.0..=1.0).contains(ratio))
                .ok_or_else(|| format!("the sampler ratio {arg:?} is not a number from 0 to 1")),
        };
        let parent_based = |root| Sampler::ParentBased(Box::new(root));
        Ok(match name.trim() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatio(ratio()?),
            "parentbased_always_on" => parent_based(Sampler::AlwaysOn),
            "parentbased_always_off" => parent_based(Sampler::AlwaysOff),
            "parentbased_traceidratio" => parent_based(Sampler::TraceIdRatio(ratio()?)),
            other => {
                return Err(format!(
                    "the sampler {other:?} is not one of: always_on, always_off, traceidratio, \
                     parentbased_always_on, parentbased_always_off, parentbased_traceidratio"
                ));
            }
        })
    }

    /// Whether a span of trace `trace_id` started under `parent` (none: the trace's first span in
    /// this process, with no caller context) is recorded.
    pub fn should_sample(&self, parent: Option<&TraceContext>, trace_id: &[u8; 16]) -> bool {
        match self {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::TraceIdRatio(ratio) => below_ratio(trace_id, *ratio),
            Sampler::ParentBased(root) => match parent {
                Some(parent) => parent.sampled,
                None => root.should_sample(None, trace_id),
            },
        }
    }
}

/// The trace id's last eight bytes (the random part of W3C ids) as a fraction of 2^64, below
/// `ratio`.
fn below_ratio(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    // 2^64 as f64 is exact; the product is below it for ratio < 1.
    let threshold = (ratio * 18_446_744_073_709_551_616.0) as u64;
    u64::from_be_bytes(low) < threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(low: u64) -> [u8; 16] {
        let mut id = [7u8; 16];
        id[8..].copy_from_slice(&low.to_be_bytes());
        id
    }

    fn parent(sampled: bool) -> TraceContext {
        TraceContext {
            sampled,
            ..TraceContext::new_root()
        }
    }

    #[test]
    fn every_specified_name_parses_and_others_are_refused() {
        assert_eq!(Sampler::parse("always_on", None), Ok(Sampler::AlwaysOn));
        assert_eq!(Sampler::parse(" always_off ", None), Ok(Sampler::AlwaysOff));
        assert_eq!(
            Sampler::parse("traceidratio", Some("0.25")),
            Ok(Sampler::TraceIdRatio(0.25))
        );
        assert_eq!(
            Sampler::parse("traceidratio", None),
            Ok(Sampler::TraceIdRatio(1.0))
        );
        assert_eq!(
            Sampler::parse("parentbased_always_on", None),
            Ok(Sampler::default())
        );
        assert_eq!(
            Sampler::parse("parentbased_always_off", None),
            Ok(Sampler::ParentBased(Box::new(Sampler::AlwaysOff)))
        );
        assert_eq!(
            Sampler::parse("parentbased_traceidratio", Some("0")),
            Ok(Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(0.0))))
        );
        for bad in ["jaeger_remote", "xray", "AlwaysOn", ""] {
            assert!(Sampler::parse(bad, None).is_err(), "{bad}");
        }
        for bad in ["1.5", "-0.1", "half", "NaN"] {
            let refused = Sampler::parse("traceidratio", Some(bad)).unwrap_err();
            assert!(refused.contains("from 0 to 1"), "{refused}");
        }
    }

    #[test]
    fn the_ratio_sampler_decides_by_the_trace_id_alone() {
        let half = Sampler::TraceIdRatio(0.5);
        assert!(half.should_sample(None, &trace(0)));
        assert!(half.should_sample(None, &trace(u64::MAX / 2)));
        assert!(!half.should_sample(None, &trace(u64::MAX / 2 + 2)));
        assert!(!half.should_sample(None, &trace(u64::MAX)));
        // Not parent-based: the parent's flag does not matter.
        assert!(half.should_sample(Some(&parent(false)), &trace(1)));
        assert!(!Sampler::TraceIdRatio(0.0).should_sample(None, &trace(0)));
        assert!(Sampler::TraceIdRatio(1.0).should_sample(None, &trace(u64::MAX)));
        // About the ratio over many ids.
        let sampled = (0..10_000u64)
            .filter(|n| half.should_sample(None, &trace(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))))
            .count();
        assert!((4_500..5_500).contains(&sampled), "{sampled}");
    }

    #[test]
    fn parent_based_samplers_follow_the_parent_and_ask_the_root_for_new_traces() {
        let default = Sampler::default();
        assert!(default.should_sample(None, &trace(u64::MAX)));
        assert!(default.should_sample(Some(&parent(true)), &trace(0)));
        assert!(!default.should_sample(Some(&parent(false)), &trace(0)));
        let none_of_mine = Sampler::ParentBased(Box::new(Sampler::AlwaysOff));
        assert!(!none_of_mine.should_sample(None, &trace(0)));
        assert!(none_of_mine.should_sample(Some(&parent(true)), &trace(0)));
        assert!(Sampler::AlwaysOn.should_sample(Some(&parent(false)), &trace(0)));
        assert!(!Sampler::AlwaysOff.should_sample(Some(&parent(true)), &trace(0)));
    }
}
