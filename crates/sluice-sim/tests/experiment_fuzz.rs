//! Experiment files are parsed from user input: arbitrary text, and valid
//! files with one line mangled, must give an error or an experiment, never a
//! panic; errors are one line.

use proptest::prelude::*;
use sluice_sim::Experiment;

const VALID: &str = r#"name = "f"
seeds = 2
policies = ["edf", "sstf", "traqios"]
baselines = ["edf"]
[sweep]
parameter = "utilization"
from = 0.1
to = 0.9
step = 0.2
[disk]
cylinders = 1000
b = 0.3
[workload]
transactions = 100
ios = [1, 20]
cache_hit = 0.1
[options]
window = 50
[options.traqios]
scale = "pending"
"#;

fn check(text: &str) {
    match Experiment::parse(text, "fuzz") {
        Ok(e) => {
            assert!(!e.points.is_empty() && !e.policies.is_empty() && e.seeds >= 1);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty() && !msg.contains('\n'), "{msg:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text);
    }

    #[test]
    fn a_mangled_line_never_panics(line in 0usize..21, junk in "[a-z_=\\[\\]\"0-9., -]{0,30}") {
        let mut lines: Vec<&str> = VALID.lines().collect();
        let i = line % lines.len();
        lines[i] = &junk;
        check(&lines.join("\n"));
    }

    #[test]
    fn numbers_anywhere_never_panic(value in prop_oneof![
        Just("-1".to_string()), Just("0".to_string()), Just("1e308".to_string()),
        Just("nan".to_string()), Just("inf".to_string()), Just("-0.0".to_string()),
        Just("18446744073709551615".to_string()), (-1e6f64..1e6).prop_map(|x| x.to_string()),
    ], key in prop_oneof![
        Just("seeds"), Just("from"), Just("to"), Just("step"), Just("cylinders"), Just("b"),
        Just("transactions"), Just("cache_hit"), Just("window"),
    ]) {
        let text: String = VALID
            .lines()
            .map(|l| if l.starts_with(&format!("{key} =")) { format!("{key} = {value}") } else { l.to_string() })
            .collect::<Vec<_>>()
            .join("\n");
        check(&text);
    }
}

#[test]
fn the_valid_file_parses() {
    let e = Experiment::parse(VALID, "fuzz").unwrap();
    assert_eq!(e.points.len(), 5);
}
