//! `bit`, the bitwise library Redis gives Lua scripts (LuaJIT's BitOp
//! API: Lua 5.1 has no bitwise operators). Scripts that keep flags or
//! Bloom filters in a string use it. Every operand is first made a signed
//! 32-bit integer as `bit.tobit` does (rounded to the nearest integer, its
//! low 32 bits kept), and every result is one.
//!
//! ```text
//! EVAL "return bit.band(12, 10)" 0           -> 8
//! EVAL "return bit.tohex(bit.lshift(1, 31))" 0 -> "80000000"
//! ```

use mlua::{Lua, Table, Variadic};

/// LuaJIT's `tobit`: the number rounded to the nearest integer (ties to
/// even), its low 32 bits as a signed integer.
fn tobit(x: f64) -> i32 {
    (x.round_ties_even() as i128).rem_euclid(1 << 32) as u32 as i32
}

/// The `bit` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary = |f: fn(i32) -> i32| lua.create_function(move |_, x: f64| Ok(f(tobit(x))));
    let shift = |f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, (x, n): (f64, f64)| Ok(f(tobit(x), tobit(n) as u32 & 31)))
    };
    let fold = |f: fn(i32, i32) -> i32| {
        lua.create_function(move |_, (x, rest): (f64, Variadic<f64>)| {
            Ok(rest.iter().fold(tobit(x), |a, &b| f(a, tobit(b))))
        })
    };
    bit.set("tobit", unary(|x| x)?)?;
    bit.set("bnot", unary(|x| !x)?)?;
    bit.set("bswap", unary(i32::swap_bytes)?)?;
    bit.set("band", fold(|a, b| a & b)?)?;
    bit.set("bor", fold(|a, b| a | b)?)?;
    bit.set("bxor", fold(|a, b| a ^ b)?)?;
    bit.set("lshift", shift(|x, n| x.wrapping_shl(n))?)?;
    bit.set("rshift", shift(|x, n| ((x as u32) >> n) as i32)?)?;
    bit.set("arshift", shift(|x, n| x >> n)?)?;
    bit.set("rol", shift(|x, n| x.rotate_left(n))?)?;
    bit.set("ror", shift(|x, n| x.rotate_right(n))?)?;
    bit.set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            // n digits (8 by default), upper case when n is negative.
            let n = n.map_or(8, tobit);
            let digits = n.unsigned_abs().clamp(1, 8) as usize;
            let low = tobit(x) as u32 as u64 & ((1u64 << (4 * digits)) - 1);
            Ok(match n < 0 {
                true => format!("{low:0digits$X}"),
                false => format!("{low:0digits$x}"),
            })
        })?,
    )?;
    Ok(bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(script: &str) -> String {
        let lua = Lua::new();
        lua.globals().set("bit", library(&lua).unwrap()).unwrap();
        lua.load(script)
            .eval::<mlua::Value>()
            .map(|v| v.to_string().unwrap())
            .unwrap()
    }

    #[test]
    fn operations_give_luajit_s_results() {
        assert_eq!(eval("return bit.band(12, 10)"), "8");
        assert_eq!(eval("return bit.bor(1, 2, 4, 8)"), "15");
        assert_eq!(eval("return bit.bxor(5, 3)"), "6");
        assert_eq!(eval("return bit.bnot(0)"), "-1");
        assert_eq!(eval("return bit.lshift(1, 31)"), "-2147483648");
        assert_eq!(eval("return bit.rshift(-1, 28)"), "15");
        assert_eq!(eval("return bit.arshift(-256, 4)"), "-16");
        assert_eq!(
            eval("return bit.rol(0x12345678, 12)"),
            tobit(f64::from(0x4567_8123u32)).to_string()
        );
        assert_eq!(eval("return bit.bswap(0x12345678)"), "2018915346");
        assert_eq!(eval("return bit.lshift(1, 33)"), "2", "the shift counts modulo 32");
    }

    #[test]
    fn tobit_keeps_the_low_32_bits_of_the_rounded_number() {
        assert_eq!(eval("return bit.tobit(0xffffffff)"), "-1");
        assert_eq!(eval("return bit.tobit(2^32 + 5)"), "5");
        assert_eq!(eval("return bit.tobit(2.5)"), "2", "ties to even");
        assert_eq!(eval("return bit.tobit(-1.5)"), "-2");
        assert_eq!(eval("return bit.tohex(255)"), "000000ff");
        assert_eq!(eval("return bit.tohex(-1, -4)"), "FFFF");
        assert_eq!(eval("return bit.tohex(0x1234, 2)"), "34");
    }
}
