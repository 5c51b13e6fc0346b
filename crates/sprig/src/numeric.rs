//! Sprig's math and number functions (`numeric.go` and the arithmetic in `functions.go`).
//!
//! Integer math goes through spf13/cast and returns `int64` (`add`, `sub`, `max`...), with
//! Go's wrapping overflow and Go's panic on integer division by zero. The float functions
//! (`addf`, `divf`...) go through shopspring/decimal v1.2.0: each operand becomes the shortest
//! decimal that round-trips, the operation is exact (division rounds half away from zero at 16
//! decimal places), and the result is the nearest `float64`, so `addf 0.1 0.2` is `0.3`.
//! `round` uses Go's own `math.Pow`, whose result can differ from a correctly rounded `pow`.

use std::cmp::Ordering;

use kalypso_gotmpl::{FuncError, FuncMap, FuncResult, List, Str, Type, Value};
use num_bigint::{BigInt, Sign};

use crate::cast::{atoi, parse_int, to_float64, to_int, to_int64};
use crate::util::{arg, arg_bytes, arg_int, func, register, variadic};

/// The most items `until`, `untilStep` and `seq` produce. Go has no limit (it runs out of
/// memory); a template must not be able to do that to the scheduler.
const MAX_SEQUENCE: usize = 10_000_000;

/// Registers the math functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let any = || Type::Interface;
    let int = || Type::INT;
    register(
        m,
        &["atoi"],
        func(vec![Type::String], |a| {
            Ok(Value::int(atoi(arg_bytes(a, 0)).unwrap_or(0)))
        }),
    );
    register(
        m,
        &["float64"],
        func(vec![any()], |a| Ok(Value::float(to_float64(&arg(a, 0))))),
    );
    register(
        m,
        &["toDecimal"],
        func(vec![any()], |a| {
            let text = match arg(a, 0) {
                Value::String(s) => s.as_bytes().to_vec(),
                other => kalypso_gotmpl::fmt::sprint_value(&other),
            };
            Ok(Value::int64(parse_int(&text, 8, 64).unwrap_or(0)))
        }),
    );
    register(m, &["seq"], variadic(vec![], int(), seq));
    register(
        m,
        &["until"],
        func(vec![int()], |a| {
            let count = arg_int(a, 0);
            let step = if count < 0 { -1 } else { 1 };
            int_list(until_step(0, count, step)?)
        }),
    );
    register(
        m,
        &["untilStep"],
        func(vec![int(), int(), int()], |a| {
            int_list(until_step(arg_int(a, 0), arg_int(a, 1), arg_int(a, 2))?)
        }),
    );
    register_int_math(m, to_int64);
    register(
        m,
        &["maxf"],
        variadic(vec![any()], any(), |a| {
            Ok(Value::float(
                a[1..].iter().map(to_float64).fold(to_float64(&arg(a, 0)), go_max),
            ))
        }),
    );
    register(
        m,
        &["minf"],
        variadic(vec![any()], any(), |a| {
            Ok(Value::float(
                a[1..].iter().map(to_float64).fold(to_float64(&arg(a, 0)), go_min),
            ))
        }),
    );
    register(
        m,
        &["add1f"],
        func(vec![any()], |a| {
            decimal_op(&arg(a, 0), &[Value::int(1)], DecimalOp::Add)
        }),
    );
    register(
        m,
        &["addf"],
        variadic(vec![], any(), |a| {
            decimal_op(&Value::float(0.0), a, DecimalOp::Add)
        }),
    );
    register(
        m,
        &["subf"],
        variadic(vec![any()], any(), |a| {
            decimal_op(&arg(a, 0), &a[1..], DecimalOp::Sub)
        }),
    );
    register(
        m,
        &["mulf"],
        variadic(vec![any()], any(), |a| {
            decimal_op(&arg(a, 0), &a[1..], DecimalOp::Mul)
        }),
    );
    register(
        m,
        &["divf"],
        variadic(vec![any()], any(), |a| {
            decimal_op(&arg(a, 0), &a[1..], DecimalOp::Div)
        }),
    );
    register(
        m,
        &["ceil"],
        func(vec![any()], |a| Ok(Value::float(to_float64(&arg(a, 0)).ceil()))),
    );
    register(
        m,
        &["floor"],
        func(vec![any()], |a| Ok(Value::float(to_float64(&arg(a, 0)).floor()))),
    );
    register(
        m,
        &["round"],
        variadic(vec![any(), int()], Type::FLOAT64, |a| {
            let round_on = match a.get(2) {
                Some(Value::Float(f, _)) => *f,
                _ => 0.5,
            };
            Ok(Value::float(round(
                to_float64(&arg(a, 0)),
                arg_int(a, 1),
                round_on,
            )))
        }),
    );
}

/// Registers the integer functions (`int`, `int64`, `add`, `sub`, `max`...) with the cast they
/// convert their arguments with: spf13/cast's in Sprig v3, Sprig v2's own `toInt64` in v2.
pub(crate) fn register_int_math(m: &mut FuncMap, to_int64: fn(&Value) -> i64) {
    let any = || Type::Interface;
    register(
        m,
        &["int64"],
        func(vec![any()], move |a| Ok(Value::int64(to_int64(&arg(a, 0))))),
    );
    register(
        m,
        &["int"],
        func(vec![any()], move |a| Ok(Value::int(to_int64(&arg(a, 0))))),
    );
    register(
        m,
        &["add1"],
        func(vec![any()], move |a| {
            Ok(Value::int64(to_int64(&arg(a, 0)).wrapping_add(1)))
        }),
    );
    register(
        m,
        &["add"],
        variadic(vec![], any(), move |a| {
            Ok(Value::int64(
                a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_int64(v))),
            ))
        }),
    );
    register(
        m,
        &["sub"],
        func(vec![any(), any()], move |a| {
            Ok(Value::int64(
                to_int64(&arg(a, 0)).wrapping_sub(to_int64(&arg(a, 1))),
            ))
        }),
    );
    register(
        m,
        &["div"],
        func(vec![any(), any()], move |a| {
            let (x, y) = (to_int64(&arg(a, 0)), to_int64(&arg(a, 1)));
            if y == 0 {
                return Err(divide_by_zero());
            }
            Ok(Value::int64(x.wrapping_div(y)))
        }),
    );
    register(
        m,
        &["mod"],
        func(vec![any(), any()], move |a| {
            let (x, y) = (to_int64(&arg(a, 0)), to_int64(&arg(a, 1)));
            if y == 0 {
                return Err(divide_by_zero());
            }
            Ok(Value::int64(x.wrapping_rem(y)))
        }),
    );
    register(
        m,
        &["mul"],
        variadic(vec![any()], any(), move |a| {
            Ok(Value::int64(
                a[1..]
                    .iter()
                    .fold(to_int64(&arg(a, 0)), |acc, v| acc.wrapping_mul(to_int64(v))),
            ))
        }),
    );
    register(
        m,
        &["biggest", "max"],
        variadic(vec![any()], any(), move |a| {
            Ok(Value::int64(
                a[1..].iter().map(to_int64).fold(to_int64(&arg(a, 0)), i64::max),
            ))
        }),
    );
    register(
        m,
        &["min"],
        variadic(vec![any()], any(), move |a| {
            Ok(Value::int64(
                a[1..].iter().map(to_int64).fold(to_int64(&arg(a, 0)), i64::min),
            ))
        }),
    );
}

fn divide_by_zero() -> FuncError {
    FuncError::new("runtime error: integer divide by zero")
}

fn int_list(items: Vec<i64>) -> FuncResult {
    Ok(Value::List(List::new(
        Type::INT,
        items.into_iter().map(Value::int).collect(),
    )))
}

/// Sprig's `untilStep`.
fn until_step(start: i64, stop: i64, step: i64) -> Result<Vec<i64>, FuncError> {
    let mut v = Vec::new();
    let push = |v: &mut Vec<i64>, i: i64| -> Result<(), FuncError> {
        if v.len() >= MAX_SEQUENCE {
            return Err(FuncError::new(format!(
                "sequence longer than {MAX_SEQUENCE} items"
            )));
        }
        v.push(i);
        Ok(())
    };
    if stop < start {
        if step >= 0 {
            return Ok(v);
        }
        let mut i = start;
        while i > stop {
            push(&mut v, i)?;
            i = i.wrapping_add(step);
        }
        return Ok(v);
    }
    if step <= 0 {
        return Ok(v);
    }
    let mut i = start;
    while i < stop {
        push(&mut v, i)?;
        i = i.wrapping_add(step);
    }
    Ok(v)
}

/// Sprig's `seq`: like the Unix command, `seq [start [step]] end`, inclusive.
fn seq(a: &[Value]) -> FuncResult {
    let p: Vec<i64> = a.iter().map(to_int).collect();
    let items = match p.len() {
        1 => {
            let (start, end) = (1, p[0]);
            let inc = if end < start { -1 } else { 1 };
            until_step(start, end.wrapping_add(inc), inc)?
        }
        2 => {
            let (start, end) = (p[0], p[1]);
            let step = if end < start { -1 } else { 1 };
            until_step(start, end.wrapping_add(step), step)?
        }
        3 => {
            let (start, step, end) = (p[0], p[1], p[2]);
            let mut inc = 1;
            if end < start {
                inc = -1;
                if step > 0 {
                    return Ok(Value::string(""));
                }
            }
            until_step(start, end.wrapping_add(inc), step)?
        }
        _ => Vec::new(),
    };
    let text: Vec<String> = items.iter().map(i64::to_string).collect();
    Ok(Value::String(Str::from(text.join(" "))))
}

/// Go's `math.Max`.
pub(crate) fn go_max(x: f64, y: f64) -> f64 {
    if x == f64::INFINITY || y == f64::INFINITY {
        return f64::INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 && x == y {
        return if x.is_sign_negative() { y } else { x };
    }
    if x > y { x } else { y }
}

/// Go's `math.Min`.
pub(crate) fn go_min(x: f64, y: f64) -> f64 {
    if x == f64::NEG_INFINITY || y == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 && x == y {
        return if x.is_sign_negative() { x } else { y };
    }
    if x < y { x } else { y }
}

/// Sprig's `round`: `val` scaled by `10^places`, rounded up when the fractional part is at
/// least `round_on`, and scaled back.
fn round(val: f64, places: i64, round_on: f64) -> f64 {
    let pow = go_pow(10.0, places as f64);
    let digit = pow * val;
    let frac = digit - digit.trunc();
    let frac = if digit.is_infinite() { f64::NAN } else { frac };
    let rounded = if frac >= round_on {
        digit.ceil()
    } else {
        digit.floor()
    };
    rounded / pow
}

/// Go's `math.Frexp`.
fn frexp(f: f64) -> (f64, i32) {
    if f == 0.0 || f.is_infinite() || f.is_nan() {
        return (f, 0);
    }
    let (f, mut exp) = if f.abs() < f64::MIN_POSITIVE {
        (f * (1u64 << 52) as f64, -52)
    } else {
        (f, 0)
    };
    let mut bits = f.to_bits();
    exp += ((bits >> 52) & 0x7FF) as i32 - 1022;
    bits &= !(0x7FFu64 << 52);
    bits |= 1022u64 << 52;
    (f64::from_bits(bits), exp)
}

/// Go's `math.Ldexp`.
fn ldexp(frac: f64, exp: i32) -> f64 {
    if frac == 0.0 || frac.is_infinite() || frac.is_nan() {
        return frac;
    }
    let (frac, e) = frexp(frac);
    let mut exp = i64::from(exp) + i64::from(e);
    let bits = frac.to_bits();
    exp += ((bits >> 52) & 0x7FF) as i64 - 1023;
    if exp < -1075 {
        return 0.0f64.copysign(frac);
    }
    if exp > 1023 {
        return if frac < 0.0 {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
    }
    let mut m = 1.0;
    if exp < -1022 {
        exp += 53;
        m = 1.0 / (1u64 << 53) as f64;
    }
    let mut x = bits & !(0x7FFu64 << 52);
    x |= ((exp + 1023) as u64) << 52;
    m * f64::from_bits(x)
}

/// Go's `math.Pow`, exactly for integral exponents (the only ones Sprig passes).
fn go_pow(x: f64, y: f64) -> f64 {
    if y == 0.0 || x == 1.0 {
        return 1.0;
    }
    if y == 1.0 {
        return x;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 || y.is_infinite() || x.is_infinite() || y.fract() != 0.0 || y.abs() >= 9.2e18 {
        return x.powf(y);
    }
    let yi = y.abs();
    let mut a1 = 1.0;
    let mut ae: i64 = 0;
    let (mut x1, xe) = frexp(x);
    let mut xe = i64::from(xe);
    let mut i = yi as i64;
    while i != 0 {
        if !(-(1 << 12)..=(1 << 12)).contains(&xe) {
            ae += xe;
            break;
        }
        if i & 1 == 1 {
            a1 *= x1;
            ae += xe;
        }
        x1 *= x1;
        xe <<= 1;
        if x1 < 0.5 {
            x1 += x1;
            xe -= 1;
        }
        i >>= 1;
    }
    if y < 0.0 {
        a1 = 1.0 / a1;
        ae = -ae;
    }
    ldexp(a1, ae.clamp(-100_000, 100_000) as i32)
}

#[derive(Clone, Copy)]
enum DecimalOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// An exact decimal `coef × 10^exp`, as shopspring/decimal represents numbers.
#[derive(Clone, Debug)]
struct Decimal {
    coef: BigInt,
    exp: i64,
}

impl Decimal {
    /// shopspring's `NewFromFloat`: the shortest decimal that round-trips to `f`.
    fn from_f64(f: f64) -> Result<Decimal, FuncError> {
        if f.is_nan() || f.is_infinite() {
            let shown = if f.is_nan() {
                "NaN"
            } else if f > 0.0 {
                "+Inf"
            } else {
                "-Inf"
            };
            return Err(FuncError::new(format!("Cannot create a Decimal from {shown}")));
        }
        if f == 0.0 {
            return Ok(Decimal {
                coef: BigInt::from(0),
                exp: 0,
            });
        }
        // Rust prints the shortest round-trip digits: "-1.2345e-7".
        let text = format!("{f:e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i64 = exp.parse().unwrap_or(0);
        let (neg, mantissa) = match mantissa.strip_prefix('-') {
            Some(m) => (true, m),
            None => (false, mantissa),
        };
        let frac_len = mantissa.split_once('.').map_or(0, |(_, f)| f.len()) as i64;
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let mut coef = BigInt::parse_bytes(digits.as_bytes(), 10).unwrap_or_default();
        if neg {
            coef = -coef;
        }
        Ok(Decimal {
            coef,
            exp: exp - frac_len,
        })
    }

    fn pow10(n: i64) -> BigInt {
        BigInt::from(10).pow(n.max(0) as u32)
    }

    fn aligned(&self, other: &Decimal) -> (BigInt, BigInt, i64) {
        let exp = self.exp.min(other.exp);
        (
            &self.coef * Decimal::pow10(self.exp - exp),
            &other.coef * Decimal::pow10(other.exp - exp),
            exp,
        )
    }

    fn add(&self, other: &Decimal) -> Decimal {
        let (a, b, exp) = self.aligned(other);
        Decimal { coef: a + b, exp }
    }

    fn sub(&self, other: &Decimal) -> Decimal {
        let (a, b, exp) = self.aligned(other);
        Decimal { coef: a - b, exp }
    }

    fn mul(&self, other: &Decimal) -> Decimal {
        Decimal {
            coef: &self.coef * &other.coef,
            exp: self.exp + other.exp,
        }
    }

    /// shopspring's `Div`: `DivRound` to 16 decimal places, half away from zero.
    fn div(&self, other: &Decimal) -> Result<Decimal, FuncError> {
        const PRECISION: i64 = 16;
        if other.coef.sign() == Sign::NoSign {
            return Err(FuncError::new("decimal division by zero"));
        }
        // self / other × 10^PRECISION = (a × 10^ea) / (b × 10^eb) × 10^PRECISION
        let shift = self.exp - other.exp + PRECISION;
        let (num, den) = if shift >= 0 {
            (&self.coef * Decimal::pow10(shift), other.coef.clone())
        } else {
            (self.coef.clone(), &other.coef * Decimal::pow10(-shift))
        };
        let mut q = &num / &den;
        let r = &num % &den;
        let twice_r: BigInt = r.magnitude().clone().into();
        let twice_r: BigInt = twice_r * 2u32;
        let den_abs: BigInt = den.magnitude().clone().into();
        if twice_r.cmp(&den_abs) != Ordering::Less {
            if (self.coef.sign() == Sign::Minus) != (other.coef.sign() == Sign::Minus) {
                q -= 1;
            } else {
                q += 1;
            }
        }
        Ok(Decimal {
            coef: q,
            exp: -PRECISION,
        })
    }

    /// The nearest `float64` (shopspring's `Float64` through `big.Rat`).
    fn to_f64(&self) -> f64 {
        let text = format!("{}e{}", self.coef, self.exp);
        text.parse().unwrap_or(0.0)
    }
}

/// Sprig's `execDecimalOp`: folds the operands with exact decimal arithmetic.
fn decimal_op(first: &Value, rest: &[Value], op: DecimalOp) -> FuncResult {
    let mut acc = Decimal::from_f64(to_float64(first))?;
    for v in rest {
        let d = Decimal::from_f64(to_float64(v))?;
        acc = match op {
            DecimalOp::Add => acc.add(&d),
            DecimalOp::Sub => acc.sub(&d),
            DecimalOp::Mul => acc.mul(&d),
            DecimalOp::Div => acc.div(&d)?,
        };
    }
    Ok(Value::float(acc.to_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcs;

    fn call(name: &str, args: &[Value]) -> FuncResult {
        funcs().get(name).expect(name).call(args)
    }

    fn f(v: FuncResult) -> f64 {
        match v.unwrap() {
            Value::Float(f, _) => f,
            other => panic!("{other:?}"),
        }
    }

    fn i(v: FuncResult) -> i64 {
        match v.unwrap() {
            Value::Int(i, _) => i,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn integer_math_casts() {
        assert_eq!(i(call("add", &[Value::string("3"), Value::int(4)])), 7);
        assert_eq!(i(call("add", &[Value::float(1.9), Value::int(1)])), 2);
        assert_eq!(i(call("sub", &[Value::float(5.9), Value::float(1.2)])), 4);
        assert_eq!(i(call("mul", &[Value::string("x"), Value::int(3)])), 0);
        assert_eq!(
            call("div", &[Value::int(1), Value::int(0)])
                .unwrap_err()
                .message(),
            "runtime error: integer divide by zero"
        );
        assert_eq!(call("add", &[]).unwrap().type_name(), "int64");
        assert_eq!(
            i(call("biggest", &[Value::int(3), Value::int(9), Value::int(2)])),
            9
        );
    }

    #[test]
    fn decimal_float_math() {
        assert_eq!(f(call("addf", &[Value::float(0.1), Value::float(0.2)])), 0.3);
        assert_eq!(f(call("subf", &[Value::int(5), Value::float(1.25)])), 3.75);
        assert_eq!(f(call("divf", &[Value::int(10), Value::int(4)])), 2.5);
        assert_eq!(
            f(call("divf", &[Value::int(1), Value::int(3)])),
            0.3333333333333333
        );
        assert_eq!(
            f(call("divf", &[Value::int(2), Value::int(3)])),
            0.6666666666666667
        );
        assert_eq!(f(call("mulf", &[Value::float(1.5), Value::int(2)])), 3.0);
        assert_eq!(f(call("add1f", &[Value::float(1.5)])), 2.5);
        assert!(call("divf", &[Value::int(1), Value::int(0)]).is_err());
    }

    #[test]
    fn rounding() {
        assert_eq!(round(1.5, 0, 0.5), 2.0);
        assert_eq!(round(1.2345, 2, 0.5), 1.23);
        assert_eq!(round(-1.5, 0, 0.5), -2.0);
        assert_eq!(round(123456.789, -2, 0.5), 123500.0);
        assert_eq!(go_pow(10.0, -2.0), 0.01);
        assert_eq!(go_pow(10.0, 22.0), 1e22);
    }

    #[test]
    fn sequences() {
        let text = |v: FuncResult| match v.unwrap() {
            Value::String(s) => s.to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text(call("seq", &[Value::int(5)])), "1 2 3 4 5");
        assert_eq!(
            text(call("seq", &[Value::int(0), Value::int(2), Value::int(10)])),
            "0 2 4 6 8 10"
        );
        assert_eq!(text(call("seq", &[Value::int(5), Value::int(2)])), "5 4 3 2");
        assert_eq!(text(call("seq", &[Value::int(-3)])), "1 0 -1 -2 -3");
        let u = call("until", &[Value::int(-3)]).unwrap();
        assert_eq!(u.type_name(), "[]int");
        assert_eq!(u.as_list().unwrap().len(), 3);
        assert_eq!(
            call("untilStep", &[Value::int(0), Value::int(1), Value::int(0)])
                .unwrap()
                .as_list()
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn conversions() {
        assert_eq!(i(call("atoi", &[Value::string("42")])), 42);
        assert_eq!(i(call("int64", &[Value::string("0x10")])), 16);
        assert_eq!(i(call("int", &[Value::string("010")])), 8);
        assert_eq!(i(call("toDecimal", &[Value::string("0777")])), 511);
        assert_eq!(f(call("float64", &[Value::string("1e3")])), 1000.0);
    }
}
