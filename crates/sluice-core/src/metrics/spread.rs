//! A median and a range: how every benchmark and every simulated
//! comparison summarizes repeated runs, so that a figure means the same
//! wherever it is printed.

/// The median of some values and their range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// Of no values: a NaN median and an empty range (min +∞, max −∞).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let values: Vec<f64> = values.into_iter().collect();
        Spread {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median: median(values),
        }
    }
}

/// The middle value; of an even count the upper of the two middle ones (a
/// value that was measured, not a mean of two); NaN of none.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut xs: Vec<f64> = values.into_iter().collect();
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value_or_the_upper_of_two() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median([]).is_nan());
        let s = Spread::of([5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
        let none = Spread::of([]);
        assert!(none.median.is_nan() && none.min == f64::INFINITY && none.max == f64::NEG_INFINITY);
    }
}
