//! `sluice model`: AppleS's throughput model (§4.3.1, Eq. 2) fitted to
//! throughput measured by hand (the fit and its table are
//! `sluice_bench::model`).

use anyhow::Result;
use clap::Args;
use sluice_core::controller::matching_point::Sample;

/// Fit AppleS's three-sample throughput model (Eq. 2) to measured throughput
#[derive(Args)]
#[command(
    long_about = "Fit AppleS's three-sample throughput model (Eq. 2) to measured throughput \
    and print its matching point C, the P `sluice proxy` would let in.\n\n\
    Give each sample as P=THROUGHPUT (requests or transactions per second measured with P \
    requests let in, e.g. by a proxy with `parallelism` pinned). Three samples are P0, P1 and P2 \
    (P2 = the number of users). More are a sweep: the lowest P is P0, the highest P2, and each P \
    between is tried as the middle sample P1, as in AppleS Fig. 7; each row gives the throughput \
    the sweep measured at that C and how far below the sweep's peak it is.\n\n\
    Example (run F7 in docs/BENCHMARKS.md): sluice model 2=813 8=1329 16=1432 24=1494 64=1242 256=1142"
)]
pub struct ModelArgs {
    /// Throughput samples as P=THROUGHPUT, three or more, each P once
    #[arg(required = true, num_args = 3.., value_name = "P=THROUGHPUT", value_parser = parse_sample)]
    samples: Vec<Sample>,
}

fn parse_sample(text: &str) -> Result<Sample, String> {
    let (p, throughput) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not P=THROUGHPUT (such as 16=1561)"))?;
    let p: usize = p
        .trim()
        .parse()
        .map_err(|_| format!("P in `{text}` is not a whole number"))?;
    let throughput: f64 = throughput
        .trim()
        .parse()
        .map_err(|_| format!("the throughput in `{text}` is not a number"))?;
    if p == 0 {
        return Err(format!("P in `{text}` must be at least 1"));
    }
    if !(throughput > 0.0 && throughput.is_finite()) {
        return Err(format!("the throughput in `{text}` must be above 0"));
    }
    Ok(Sample { p, throughput })
}

pub fn run(args: ModelArgs) -> Result<()> {
    print!("{}", sluice_bench::model::report(args.samples)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: usize, throughput: f64) -> Sample {
        Sample { p, throughput }
    }

    #[test]
    fn samples_parse_and_bad_ones_are_named() {
        assert_eq!(parse_sample("16=1561.5").unwrap(), s(16, 1561.5));
        for (bad, says) in [
            ("16", "is not P=THROUGHPUT"),
            ("x=3", "P in `x=3` is not a whole number"),
            ("0=3", "must be at least 1"),
            ("4=fast", "is not a number"),
            ("4=-1", "must be above 0"),
            ("4=inf", "must be above 0"),
        ] {
            let e = parse_sample(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
