//! DynamoDB numbers: exact decimals of at most 38 significant digits, magnitudes from 1E-130
//! to below 1E+126, compared and added without rounding.

use std::cmp::Ordering;

use super::fault::Fault;

/// The most significant digits a number may have.
const PRECISION: usize = 38;
/// The largest exponent `e` of `0.d… × 10^e` (9.99…E+125).
const MAX_EXP: i64 = 126;
/// The smallest exponent `e` of `0.d… × 10^e` (1E-130).
const MIN_EXP: i64 = -129;

/// An exact decimal `±0.d₁d₂…dₙ × 10^exp`; digits without leading or trailing zeros, none
/// for zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    /// Parses a number as DynamoDB reads it (`-12.50`, `1e3`, `+7`), refusing what it cannot
    /// store.
    pub(crate) fn parse(text: &str) -> Result<Decimal, Fault> {
        let bad = || {
            Fault::validation(format!(
                "A value provided cannot be converted into a number: {text:?}"
            ))
        };
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if let Some(&sign @ (b'+' | b'-')) = bytes.first() {
            negative = sign == b'-';
            i = 1;
        }
        let mut digits = Vec::new();
        let mut point: Option<usize> = None;
        let mut seen_digit = false;
        while i < bytes.len() {
            match bytes[i] {
                d @ b'0'..=b'9' => {
                    digits.push(d - b'0');
                    seen_digit = true;
                }
                b'.' if point.is_none() => point = Some(digits.len()),
                b'e' | b'E' => break,
                _ => return Err(bad()),
            }
            i += 1;
        }
        if !seen_digit {
            return Err(bad());
        }
        let mut exponent: i64 = 0;
        if i < bytes.len() {
            let rest = &text[i + 1..];
            let unsigned = rest.strip_prefix(['+', '-']).unwrap_or(rest);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            // Far beyond any storable exponent: saturate, the range check refuses it.
            exponent = rest.parse::<i64>().unwrap_or(if rest.starts_with('-') {
                i64::MIN / 4
            } else {
                i64::MAX / 4
            });
        }
        let integer_digits = point.unwrap_or(digits.len()) as i64;
        Decimal::normalized(negative, digits, integer_digits.saturating_add(exponent))
    }

    /// `±0.digits × 10^exp` with zeros trimmed, checked against DynamoDB's range.
    fn normalized(negative: bool, mut digits: Vec<u8>, mut exp: i64) -> Result<Decimal, Fault> {
        let leading = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading);
        exp = exp.saturating_sub(leading as i64);
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            return Ok(Decimal::zero());
        }
        if digits.len() > PRECISION {
            return Err(Fault::validation(
                "Attempting to store more than 38 significant digits in a Number",
            ));
        }
        if exp > MAX_EXP {
            return Err(Fault::validation(
                "Number overflow. Attempting to store a number with magnitude larger than supported range",
            ));
        }
        if exp < MIN_EXP {
            return Err(Fault::validation(
                "Number underflow. Attempting to store a number with magnitude smaller than supported range",
            ));
        }
        Ok(Decimal {
            negative,
            digits,
            exp,
        })
    }

    fn zero() -> Decimal {
        Decimal {
            negative: false,
            digits: Vec::new(),
            exp: 0,
        }
    }

    /// The canonical text DynamoDB returns (plain notation, no superfluous zeros).
    pub(crate) fn to_text(&self) -> String {
        if self.digits.is_empty() {
            return "0".to_owned();
        }
        let mut out = String::new();
        if self.negative {
            out.push('-');
        }
        let digit = |d: &u8| char::from(b'0' + d);
        let len = self.digits.len() as i64;
        if self.exp <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-self.exp) as usize));
            out.extend(self.digits.iter().map(digit));
        } else if self.exp >= len {
            out.extend(self.digits.iter().map(digit));
            out.extend(std::iter::repeat_n('0', (self.exp - len) as usize));
        } else {
            let (whole, fraction) = self.digits.split_at(self.exp as usize);
            out.extend(whole.iter().map(digit));
            out.push('.');
            out.extend(fraction.iter().map(digit));
        }
        out
    }

    /// `self + other`, exactly.
    ///
    /// # Errors
    /// A `ValidationException` when the sum cannot be stored (more than 38 digits, out of
    /// range), as DynamoDB refuses it.
    pub(crate) fn add(&self, other: &Decimal) -> Result<Decimal, Fault> {
        if self.digits.is_empty() {
            return Ok(other.clone());
        }
        if other.digits.is_empty() {
            return Ok(self.clone());
        }
        // Integers at the exponent of the lowest digit of either: value = int × 10^low.
        let low = (self.exp - self.digits.len() as i64).min(other.exp - other.digits.len() as i64);
        let a = self.integer_at(low);
        let b = other.integer_at(low);
        let (negative, magnitude) = if self.negative == other.negative {
            (self.negative, add_magnitudes(&a, &b))
        } else {
            match compare_magnitudes(&a, &b) {
                Ordering::Equal => return Ok(Decimal::zero()),
                Ordering::Greater => (self.negative, subtract_magnitudes(&a, &b)),
                Ordering::Less => (other.negative, subtract_magnitudes(&b, &a)),
            }
        };
        // Back to most-significant-first digits.
        let digits: Vec<u8> = magnitude.iter().rev().copied().collect();
        let exp = low + digits.len() as i64;
        Decimal::normalized(negative, digits, exp)
    }

    /// `-self`.
    pub(crate) fn negated(&self) -> Decimal {
        Decimal {
            negative: !self.negative && !self.digits.is_empty(),
            ..self.clone()
        }
    }

    /// The digits as an integer at exponent `low` (least significant first).
    fn integer_at(&self, low: i64) -> Vec<u8> {
        let shift = (self.exp - self.digits.len() as i64 - low) as usize;
        let mut out = vec![0; shift];
        out.extend(self.digits.iter().rev());
        out
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        let sign = |d: &Decimal| match (d.digits.is_empty(), d.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        };
        let (sa, sb) = (sign(self), sign(other));
        if sa != sb || sa == 0 {
            return sa.cmp(&sb);
        }
        let magnitude = self
            .exp
            .cmp(&other.exp)
            .then_with(|| self.digits.cmp(&other.digits));
        if sa < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn add_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let sum = a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0) + carry;
        out.push(sum % 10);
        carry = sum / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a - b` for `a >= b` (least significant digit first).
fn subtract_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0;
    for (i, &digit) in a.iter().enumerate() {
        let sub = b.get(i).copied().unwrap_or(0) + borrow;
        if digit >= sub {
            out.push(digit - sub);
            borrow = 0;
        } else {
            out.push(digit + 10 - sub);
            borrow = 1;
        }
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

fn compare_magnitudes(a: &[u8], b: &[u8]) -> Ordering {
    let trim = |x: &[u8]| x.len() - x.iter().rev().take_while(|&&d| d == 0).count();
    let (la, lb) = (trim(a), trim(b));
    la.cmp(&lb)
        .then_with(|| a[..la].iter().rev().cmp(b[..lb].iter().rev()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(text: &str) -> Decimal {
        Decimal::parse(text).unwrap()
    }

    #[test]
    fn numbers_are_read_and_written_canonically() {
        for (given, canonical) in [
            ("0", "0"),
            ("-0", "0"),
            ("007", "7"),
            ("1.50", "1.5"),
            ("-12.5e2", "-1250"),
            ("+3", "3"),
            ("1E-3", "0.001"),
            ("9223372036854775807", "9223372036854775807"),
            ("1e30", "1000000000000000000000000000000"),
        ] {
            assert_eq!(n(given).to_text(), canonical, "{given}");
        }
        for bad in ["", "-", ".", "1e", "1.2.3", "abc", " 1", "1e+", "0x10"] {
            assert!(Decimal::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn what_dynamodb_cannot_store_is_refused() {
        assert!(Decimal::parse("1e126").is_err());
        assert!(Decimal::parse("9.9999999999999999999999999999999999999e125").is_ok());
        assert!(Decimal::parse("1e-130").is_ok());
        assert!(Decimal::parse("1e-131").is_err());
        assert!(Decimal::parse(&"1".repeat(39)).is_err());
        assert!(Decimal::parse(&format!("{}000", "1".repeat(38))).is_ok());
    }

    #[test]
    fn sums_are_exact_beyond_i64() {
        let sum = |a: &str, b: &str| n(a).add(&n(b)).unwrap().to_text();
        assert_eq!(sum("9223372036854775807", "1"), "9223372036854775808");
        assert_eq!(sum("-9223372036854775808", "-1"), "-9223372036854775809");
        assert_eq!(sum("5", "-7"), "-2");
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(sum("100", "-100"), "0");
        assert_eq!(sum("1000", "-1"), "999");
        assert_eq!(sum("-2.5", "2.25"), "-0.25");
        // 39 significant digits: DynamoDB refuses to store the sum.
        assert!(n(&"9".repeat(38)).add(&n("1e-1")).is_err());
        assert!(n("9e125").add(&n("9e125")).is_err());
    }

    #[test]
    fn order_is_numeric() {
        let mut values: Vec<Decimal> = ["10", "-1", "2", "-10", "0", "0.5", "-0.5", "1e3"]
            .iter()
            .map(|t| n(t))
            .collect();
        values.sort();
        let texts: Vec<String> = values.iter().map(Decimal::to_text).collect();
        assert_eq!(texts, ["-10", "-1", "-0.5", "0", "0.5", "2", "10", "1000"]);
        assert_eq!(n("1.0").cmp(&n("1")), Ordering::Equal);
        assert_eq!(n("3").negated().to_text(), "-3");
    }
}
