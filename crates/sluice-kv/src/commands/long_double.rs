//! INCRBYFLOAT's arithmetic as Redis does it on x86-64 Linux: C's `long
//! double`, the x87 extended format with a 64-bit significand, read with
//! `strtold` and written with `%.17Lf`, trailing zeros trimmed. An `f64`
//! answers `0.30000000000000004` for 0.1 + 0.2 where Redis answers `0.3`,
//! and Redis's own artifacts (`1000.19999999999999996` for 1000.1 + 0.1)
//! come from the 64-bit significand, so the format is emulated in
//! software: every step is exact on big integers, then rounded once to
//! nearest, ties to even, as the hardware and glibc round.

use std::cmp::Ordering;

/// Bits of the significand, the integer bit included.
const SIGNIFICAND_BITS: u64 = 64;
/// Exponent of the least significant bit of the smallest subnormal.
const MIN_EXP: i64 = -16445;
/// Exponent of the least significant bit of the largest finite value.
const MAX_EXP: i64 = 16320;
/// Redis refuses longer texts (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;
/// Fractional digits of `%.17Lf`.
const FRACTION_DIGITS: usize = 17;

/// A `long double` other than NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LongDouble {
    /// `(-1)^neg * significand * 2^exp`.
    Finite {
        neg: bool,
        significand: u64,
        exp: i64,
    },
    Infinite {
        neg: bool,
    },
}

/// An unsigned integer of any size, 32-bit limbs, least significant first,
/// no zero limbs at the top.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v > 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    /// `self * m + a`.
    fn mul_add(&mut self, m: u32, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn bit_len(&self) -> u64 {
        self.0
            .last()
            .map_or(0, |top| self.0.len() as u64 * 32 - u64::from(top.leading_zeros()))
    }

    fn bit(&self, i: u64) -> bool {
        self.0
            .get((i / 32) as usize)
            .is_some_and(|limb| limb >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let (whole, bits) = (((i / 32) as usize).min(self.0.len()), i % 32);
        let partial = self.0.get(whole).map_or(0, |&l| l & ((1u64 << bits) - 1) as u32);
        self.0[..whole].iter().any(|&l| l != 0) || partial != 0
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return Big::default();
        }
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        let mut out = vec![0; limbs];
        let mut carry = 0u32;
        for &l in &self.0 {
            out.push(if bits == 0 { l } else { l << bits | carry });
            carry = if bits == 0 { 0 } else { l >> (32 - bits) };
        }
        out.push(carry);
        let mut b = Big(out);
        b.trim();
        b
    }

    fn shr(&self, n: u64) -> Big {
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        if limbs >= self.0.len() {
            return Big::default();
        }
        let src = &self.0[limbs..];
        let out: Vec<u32> = (0..src.len())
            .map(|i| {
                let high = src.get(i + 1).copied().unwrap_or(0);
                if bits == 0 {
                    src[i]
                } else {
                    src[i] >> bits | high << (32 - bits)
                }
            })
            .collect();
        let mut b = Big(out);
        b.trim();
        b
    }

    fn low_u128(&self) -> u128 {
        self.0.iter().take(4).rev().fold(0, |acc, &l| acc << 32 | u128::from(l))
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(other.0.len()) {
            let v = u64::from(self.0.get(i).copied().unwrap_or(0))
                + u64::from(other.0.get(i).copied().unwrap_or(0))
                + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        out.push(carry as u32);
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self - other`, for `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, &l) in self.0.iter().enumerate() {
            let v = i64::from(l) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            out.push((v + (borrow << 32)) as u32);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    /// Quotient and whether a remainder is left, for a quotient known to
    /// fit in 128 bits.
    fn div_small_quotient(&self, divisor: &Big) -> (u128, bool) {
        let shift = self.bit_len().saturating_sub(divisor.bit_len());
        let mut rem = self.shr(shift);
        let mut q = 0u128;
        for i in (0..=shift).rev() {
            if i < shift {
                rem = rem.shl(1);
                if self.bit(i) {
                    rem.mul_add(1, 1);
                }
            }
            q <<= 1;
            if rem.cmp(divisor) != Ordering::Less {
                rem = rem.sub(divisor);
                q |= 1;
            }
        }
        (q, !rem.is_zero())
    }

    /// Decimal digits, most significant first ("0" for zero).
    fn to_decimal(&self) -> String {
        let mut limbs = self.0.clone();
        let mut chunks = Vec::new();
        while !limbs.is_empty() {
            let mut rem = 0u64;
            for l in limbs.iter_mut().rev() {
                let v = rem << 32 | u64::from(*l);
                *l = (v / 1_000_000_000) as u32;
                rem = v % 1_000_000_000;
            }
            chunks.push(rem);
            while limbs.last() == Some(&0) {
                limbs.pop();
            }
        }
        let mut s = chunks.pop().map_or("0".to_string(), |c| c.to_string());
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:09}"));
        }
        s
    }
}

fn pow10(n: u64) -> Big {
    let mut b = Big::from_u128(1);
    for _ in 0..n {
        b.mul_add(10, 0);
    }
    b
}

/// `n * 2^exp`, `sticky` if a little more was cut off below it, rounded
/// to a `long double` of sign `neg`.
fn round(neg: bool, n: &Big, exp: i64, sticky: bool) -> LongDouble {
    if n.is_zero() {
        return LongDouble::Finite {
            neg,
            significand: 0,
            exp: 0,
        };
    }
    let len = n.bit_len() as i64;
    let drop = (len - SIGNIFICAND_BITS as i64).max(MIN_EXP - exp);
    let (mut significand, mut exp) = if drop <= 0 {
        (n.low_u128() << -drop, exp + drop)
    } else {
        let drop = drop as u64;
        let mut q = n.shr(drop).low_u128();
        let half = n.bit(drop - 1);
        let rest = sticky || n.any_below(drop - 1);
        if half && (rest || q & 1 == 1) {
            q += 1;
        }
        (q, exp + drop as i64)
    };
    if significand >> SIGNIFICAND_BITS != 0 {
        significand >>= 1;
        exp += 1;
    }
    if exp > MAX_EXP {
        return LongDouble::Infinite { neg };
    }
    LongDouble::Finite {
        neg,
        significand: significand as u64,
        exp,
    }
}

/// Digits of one radix, as `strtold` reads a mantissa: the digits as an
/// integer, and how many of them follow the point.
fn mantissa(text: &[u8], radix: u32) -> Option<(Big, u64, &[u8])> {
    let mut n = Big::default();
    let (mut digits, mut fraction, mut point) = (0, 0, false);
    let mut rest = text;
    while let Some((&c, tail)) = rest.split_first() {
        if c == b'.' && !point {
            point = true;
        } else if let Some(d) = (c as char).to_digit(radix) {
            n.mul_add(radix, d);
            digits += 1;
            fraction += u64::from(point);
        } else {
            break;
        }
        rest = tail;
    }
    (digits > 0).then_some((n, fraction, rest))
}

/// `[+-]digits` to the end of `text`, saturated far beyond any exponent
/// a finite value can have.
fn exponent(text: &[u8]) -> Option<i64> {
    let (neg, digits) = match text.split_first()? {
        (b'-', d) => (true, d),
        (b'+', d) => (false, d),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let e = digits
        .iter()
        .fold(0i64, |acc, d| (acc * 10 + i64::from(d - b'0')).min(1 << 40));
    Some(if neg { -e } else { e })
}

/// The text as Redis's `string2ld` accepts it: all of it read by
/// `strtold` (decimal, hexadecimal with a `p` exponent, `inf`,
/// `infinity`), no leading space, no NaN, no overflow, and no underflow
/// to zero.
pub(super) fn parse(text: &[u8]) -> Option<LongDouble> {
    if text.is_empty() || text.len() >= MAX_CHARS {
        return None;
    }
    let (neg, body) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some(LongDouble::Infinite { neg });
    }
    let value = if lower.starts_with(b"0x") {
        let (n, fraction, rest) = mantissa(&body[2..], 16)?;
        let p = match rest {
            [] => 0,
            [b'p' | b'P', e @ ..] => exponent(e)?,
            _ => return None,
        };
        if n.is_zero() {
            return Some(round(neg, &n, 0, false));
        }
        let exp = p - 4 * fraction as i64;
        let top = n.bit_len() as i64 + exp;
        // Past the largest finite value, or under half the smallest
        // subnormal: refused before any shift of that size.
        if top > MAX_EXP + SIGNIFICAND_BITS as i64 + 1 || top < MIN_EXP {
            return None;
        }
        round(neg, &n, exp, false)
    } else {
        let (n, fraction, rest) = mantissa(body, 10)?;
        let e = match rest {
            [] => 0,
            [b'e' | b'E', e @ ..] => exponent(e)?,
            _ => return None,
        };
        if n.is_zero() {
            return Some(round(neg, &n, 0, false));
        }
        let e = e - fraction as i64;
        // Bounds before any big arithmetic: 10^4933 overflows, and below
        // 10^-4952 even the smallest subnormal is more than twice the value.
        let magnitude = n.to_decimal().len() as i64 + e;
        if !(-4952..=4934).contains(&magnitude) {
            return None;
        }
        if e >= 0 {
            let mut v = n;
            for _ in 0..e {
                v.mul_add(10, 0);
            }
            round(neg, &v, 0, false)
        } else {
            let divisor = pow10(e.unsigned_abs());
            // A quotient of 66 or 67 bits: enough to round with, and the
            // bits shifted out or left over only say "a little more".
            let shift = (divisor.bit_len() + SIGNIFICAND_BITS + 2) as i64 - n.bit_len() as i64;
            let (numerator, cut) = if shift >= 0 {
                (n.shl(shift as u64), false)
            } else {
                (n.shr(shift.unsigned_abs()), n.any_below(shift.unsigned_abs()))
            };
            let (q, left) = numerator.div_small_quotient(&divisor);
            round(neg, &Big::from_u128(q), -shift, left || cut)
        }
    };
    match value {
        LongDouble::Finite { significand: 0, .. } | LongDouble::Infinite { .. } => None,
        finite => Some(finite),
    }
}

impl LongDouble {
    /// `self + other`; `None` for infinity - infinity (NaN).
    pub(super) fn add(self, other: LongDouble) -> Option<LongDouble> {
        use LongDouble::{Finite, Infinite};
        match (self, other) {
            (Infinite { neg: a }, Infinite { neg: b }) if a != b => None,
            (Infinite { neg }, _) | (_, Infinite { neg }) => Some(Infinite { neg }),
            (
                Finite {
                    significand: 0, neg: a, ..
                },
                Finite {
                    significand: 0, neg: b, ..
                },
            ) => Some(Finite {
                neg: a && b,
                significand: 0,
                exp: 0,
            }),
            (Finite { significand: 0, .. }, x) | (x, Finite { significand: 0, .. }) => Some(x),
            (
                Finite {
                    neg: na,
                    significand: ma,
                    exp: ea,
                },
                Finite {
                    neg: nb,
                    significand: mb,
                    exp: eb,
                },
            ) => {
                let low = ea.min(eb);
                let a = Big::from_u128(ma.into()).shl((ea - low) as u64);
                let b = Big::from_u128(mb.into()).shl((eb - low) as u64);
                Some(if na == nb {
                    round(na, &a.add(&b), low, false)
                } else {
                    match a.cmp(&b) {
                        Ordering::Equal => Finite {
                            neg: false,
                            significand: 0,
                            exp: 0,
                        },
                        Ordering::Greater => round(na, &a.sub(&b), low, false),
                        Ordering::Less => round(nb, &b.sub(&a), low, false),
                    }
                })
            }
        }
    }

    pub(super) fn is_finite(self) -> bool {
        matches!(self, LongDouble::Finite { .. })
    }

    /// `%.17Lf` with the zeros after the point trimmed, and "-0" as "0":
    /// Redis's `ld2string` in its human mode.
    pub(super) fn to_human(self) -> String {
        let (neg, significand, exp) = match self {
            LongDouble::Finite { neg, significand, exp } => (neg, significand, exp),
            LongDouble::Infinite { neg } => return if neg { "-inf" } else { "inf" }.into(),
        };
        let mut scaled = Big::from_u128(significand.into());
        for _ in 0..FRACTION_DIGITS {
            scaled.mul_add(10, 0);
        }
        if exp >= 0 {
            scaled = scaled.shl(exp as u64);
        } else {
            let drop = exp.unsigned_abs();
            let half = scaled.bit(drop - 1);
            let rest = scaled.any_below(drop - 1);
            let q = scaled.shr(drop);
            scaled = if half && (rest || q.bit(0)) {
                q.add(&Big::from_u128(1))
            } else {
                q
            };
        }
        let digits = format!("{:0>width$}", scaled.to_decimal(), width = FRACTION_DIGITS + 1);
        let (int, frac) = digits.split_at(digits.len() - FRACTION_DIGITS);
        let frac = frac.trim_end_matches('0');
        let mut s = String::with_capacity(digits.len() + 2);
        if neg && !(int == "0" && frac.is_empty()) {
            s.push('-');
        }
        s.push_str(int);
        if !frac.is_empty() {
            s.push('.');
            s.push_str(frac);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(a: &str, b: &str) -> String {
        let (a, b) = (parse(a.as_bytes()).unwrap(), parse(b.as_bytes()).unwrap());
        a.add(b).unwrap().to_human()
    }

    /// Each expected value is what Redis 7.0 answers on x86-64 for
    /// `SET k a` then `INCRBYFLOAT k b`.
    #[test]
    fn sums_are_redis_answers() {
        for (a, b, redis) in [
            ("0.1", "0.2", "0.3"),
            ("1000.1", "0.1", "1000.19999999999999996"),
            ("123456.7", "0.1", "123456.80000000000000426"),
            ("17179869184.3", "0.3", "17179869184.60000000149011612"),
            ("1e20", "0.1", "100000000000000000000"),
            ("3.3", "1.1", "4.4"),
            ("99999.99", "0.01", "100000"),
            ("5", "1e-20", "5"),
            ("1e3", "1", "1001"),
            ("2", "-2", "0"),
            ("-0", "-0", "0"),
            ("1.5", "1.5", "3"),
            ("10.50", "0.1", "10.6"),
            ("1", "0x10", "17"),
            ("0", "-1.25", "-1.25"),
            ("1655.760", "0.28140", "1656.04139999999999999"),
            ("722337", "0.12337", "722337.12337000000002263"),
            ("-818573.9733122699", "61e22", "609999999999999999213568"),
            ("8957.307", "667e-27", "8957.30700000000000038"),
        ] {
            assert_eq!(sum(a, b), redis, "{a} + {b}");
        }
        assert_eq!(sum("1", "1e400"), "10000000000000000000281880683947586514586453433629052038625910693539685534008629862039363994848324160522094053927317616200295822777259255734023828976593340661017797447434546173917862448116674971723778943824391593338047470675026246684401359237513603830343735485505244955964979021825038280091068414947402456898653040951017512658092615827588920183472511643316591362664138176309734806343732497430221946880");
    }

    #[test]
    fn texts_are_read_as_string2ld_reads_them() {
        for bad in [
            "abc", " 1", "1 ", "", "1e", "0x", ".", "nan", "-nan", "1e400000", "1e-5000", "1..2", "0x1p",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
        for good in ["1.", ".5", "+3", "1E+2", "0x1.8p1", "inf", "-Infinity", "0", "-0.0"] {
            assert!(parse(good.as_bytes()).is_some(), "{good:?}");
        }
        assert_eq!(parse(b"0x1.8p1").unwrap().to_human(), "3");
        assert!(!parse(b"-inf").unwrap().is_finite());
        assert_eq!(parse(b"inf").unwrap().add(parse(b"-inf").unwrap()), None);
        assert_eq!(parse(&vec![b'1'; MAX_CHARS]), None);
    }
}
