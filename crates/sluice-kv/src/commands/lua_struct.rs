//! `struct`, the binary packing library Redis gives Lua scripts: numbers
//! and strings to and from bytes, under a format string, as C structs lay
//! them out. Scripts that keep fixed-width records in a string value use
//! it.
//!
//! ```text
//! EVAL "return struct.pack('>I2', 258)" 0               -> "\x01\x02"
//! EVAL "return {struct.unpack('>h s', '\1\2ab\0')}" 0    -> 258, "ab", 6
//! EVAL "return struct.size('!4 b i')" 0                  -> 8
//! ```
//!
//! The format, read left to right (spaces ignored):
//!
//! | option | what |
//! |---|---|
//! | `<` `>` | little- or big-endian from here on (little at first, as this machine) |
//! | `!n` | align to at most `n` bytes from here on (a power of 2; `!` alone: 8); no alignment at first |
//! | `b` `B`, `h` `H`, `l` `L`, `T`, `in` `In` | a signed (lower case) or unsigned integer of 1, 2, 8, 8 and `n` bytes (`n` up to 32, 4 by default) |
//! | `f` `d` | a float, a double |
//! | `s` | a string ended by a zero byte |
//! | `cn` | `n` bytes of a string; `c0`: the whole string (pack), as many bytes as the integer unpacked just before says (unpack) |
//! | `x` | a zero byte of padding |
//!
//! Written by hand: no crate reads this format, and what scripts expect is
//! Redis's exact bytes, errors included (an integer wider than 8 bytes
//! keeps its low 8 bytes and pads with zeros, a number is truncated toward
//! zero). `unpack` returns numbers as Lua numbers (doubles), so integers
//! beyond 2^53 lose precision, as in Redis.

use mlua::{Lua, MultiValue, Table, Value};

/// Widest integer, in bytes.
const MAX_INT_SIZE: usize = 32;
/// What `!` alone aligns to.
const MAX_ALIGN: usize = 8;

/// Where the format stands: byte order and alignment.
struct Layout {
    big_endian: bool,
    align: usize,
}

/// One option of the format, with its size in bytes (0 for a control
/// option, or a `c0`).
struct FormatOption {
    code: u8,
    size: usize,
}

/// Reads the options of a format one by one.
struct Format<'a> {
    text: &'a [u8],
    at: usize,
    layout: Layout,
    /// The function reading it, for errors.
    function: &'static str,
}

impl<'a> Format<'a> {
    fn new(text: &'a [u8], function: &'static str) -> Format<'a> {
        Format {
            text,
            at: 0,
            layout: Layout {
                big_endian: false,
                align: 1,
            },
            function,
        }
    }

    /// The digits at the cursor as a number, or `default` if there are none.
    fn number(&mut self, default: usize) -> mlua::Result<usize> {
        if !self.text.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(&d) = self.text.get(self.at).filter(|d| d.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(usize::from(d - b'0')))
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or_else(|| mlua::Error::runtime("integral size overflow"))?;
            self.at += 1;
        }
        Ok(n)
    }

    /// The next option, with its size; a control option (`<`, `>`, `!`,
    /// a space) changes the layout and is returned with size 0.
    fn next(&mut self) -> mlua::Result<Option<FormatOption>> {
        let Some(&code) = self.text.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        let size = match code {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(mlua::Error::runtime(format!(
                        "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                    )));
                }
                size
            }
            b's' => 0,
            b' ' => 0,
            b'<' | b'>' => {
                self.layout.big_endian = code == b'>';
                0
            }
            b'!' => {
                let align = self.number(MAX_ALIGN)?;
                if !align.is_power_of_two() {
                    return Err(mlua::Error::runtime(format!("alignment {align} is not a power of 2")));
                }
                self.layout.align = align;
                0
            }
            other => {
                return Err(bad_argument(
                    1,
                    self.function,
                    &format!("invalid format option '{}'", char::from(other)),
                ))
            }
        };
        Ok(Some(FormatOption { code, size }))
    }

    /// Padding before an option of `size` bytes at offset `at`: to the
    /// smaller of its size and the alignment (strings are not aligned).
    fn padding(&self, at: usize, option: &FormatOption) -> usize {
        if option.size == 0 || option.code == b'c' {
            return 0;
        }
        let to = option.size.min(self.layout.align);
        // Sizes that are not powers of 2 (`i3`) align as Redis's mask does.
        (to - (at & (to - 1))) & (to - 1)
    }
}

/// Lua's "bad argument" error.
fn bad_argument(n: usize, function: &str, why: &str) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument #{n} to '{function}' ({why})"))
}

/// Lua's complaint about argument `n` not being a `wanted`.
fn wrong_type(args: &[Value], n: usize, function: &str, wanted: &str) -> mlua::Error {
    let got = args.get(n - 1).map_or("no value", Value::type_name);
    bad_argument(n, function, &format!("{wanted} expected, got {got}"))
}

/// The number argument `n` (1-based, the format first), as Lua's
/// `checknumber`: a number, or a string that reads as one.
fn number(lua: &Lua, args: &[Value], n: usize, function: &str) -> mlua::Result<f64> {
    let value = args.get(n - 1).cloned().unwrap_or(Value::Nil);
    lua.coerce_number(value)?
        .ok_or_else(|| wrong_type(args, n, function, "number"))
}

/// The string argument `n`, as Lua's `checklstring` (a number becomes its
/// text).
fn bytes(lua: &Lua, args: &[Value], n: usize, function: &str) -> mlua::Result<Vec<u8>> {
    let value = args.get(n - 1).cloned().unwrap_or(Value::Nil);
    match lua.coerce_string(value)? {
        Some(s) => Ok(s.as_bytes().to_vec()),
        None => Err(wrong_type(args, n, function, "string")),
    }
}

/// `x` truncated toward zero into 64 bits, as C's cast of a double: a
/// negative number through the signed type.
fn integer_bits(x: f64) -> u64 {
    if x < 0.0 {
        x as i64 as u64
    } else {
        x as u64
    }
}

/// `value`'s low bytes, `size` of them, in the layout's order; bytes past
/// the 8th are zero.
fn put_integer(out: &mut Vec<u8>, value: u64, size: usize, big_endian: bool) {
    let little: Vec<u8> = (0..size)
        .map(|i| if i < 8 { (value >> (8 * i)) as u8 } else { 0 })
        .collect();
    if big_endian {
        out.extend(little.iter().rev());
    } else {
        out.extend(little);
    }
}

/// The integer in `bytes`, sign-extended if `signed`, as a Lua number.
fn get_integer(bytes: &[u8], signed: bool, big_endian: bool) -> f64 {
    let mut value: u64 = 0;
    let mut fold = |b: u8| value = (value << 8) | u64::from(b);
    if big_endian {
        bytes.iter().for_each(|&b| fold(b));
    } else {
        bytes.iter().rev().for_each(|&b| fold(b));
    }
    if !signed {
        return value as f64;
    }
    let bits = 8 * bytes.len();
    // `i0` reads no byte: 0.
    if (1..64).contains(&bits) && value >> (bits - 1) & 1 == 1 {
        value |= u64::MAX << bits;
    }
    value as i64 as f64
}

/// `struct.pack(format, ...)`.
fn pack(lua: &Lua, args: &[Value]) -> mlua::Result<Vec<u8>> {
    let format = bytes(lua, args, 1, "pack")?;
    let mut format = Format::new(&format, "pack");
    let mut out = Vec::new();
    let mut arg = 2;
    while let Some(option) = format.next()? {
        let padding = format.padding(out.len(), &option);
        out.resize(out.len() + padding, 0);
        let big = format.layout.big_endian;
        match option.code {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                put_integer(
                    &mut out,
                    integer_bits(number(lua, args, arg, "pack")?),
                    option.size,
                    big,
                );
                arg += 1;
            }
            b'x' => out.push(0),
            b'f' | b'd' => {
                let x = number(lua, args, arg, "pack")?;
                arg += 1;
                match (option.code, big) {
                    (b'f', true) => out.extend((x as f32).to_be_bytes()),
                    (b'f', false) => out.extend((x as f32).to_le_bytes()),
                    (_, true) => out.extend(x.to_be_bytes()),
                    (_, false) => out.extend(x.to_le_bytes()),
                }
            }
            b'c' | b's' => {
                let text = bytes(lua, args, arg, "pack")?;
                arg += 1;
                let size = if option.size == 0 { text.len() } else { option.size };
                if text.len() < size {
                    // Lua names the argument after the one it checked.
                    return Err(bad_argument(arg, "pack", "string too short"));
                }
                out.extend_from_slice(&text[..size]);
                if option.code == b's' {
                    out.push(0);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `struct.unpack(format, data [, position])`: the values, then the
/// position after them (1-based).
fn unpack(lua: &Lua, args: &[Value]) -> mlua::Result<MultiValue> {
    let format = bytes(lua, args, 1, "unpack")?;
    let data = bytes(lua, args, 2, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        Some(_) => number(lua, args, 3, "unpack")?,
    };
    if start < 1.0 {
        return Err(bad_argument(3, "unpack", "offset must be 1 or greater"));
    }
    let mut at = start as usize - 1;
    let mut format = Format::new(&format, "unpack");
    let mut values: Vec<Value> = Vec::new();
    let too_short = || bad_argument(2, "unpack", "data string too short");
    while let Some(option) = format.next()? {
        at += format.padding(at, &option);
        let fits = |at: usize, size: usize| at.checked_add(size).is_some_and(|end| end <= data.len());
        if !fits(at, option.size) {
            return Err(too_short());
        }
        let big = format.layout.big_endian;
        let mut size = option.size;
        match option.code {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let signed = option.code.is_ascii_lowercase();
                values.push(Value::Number(get_integer(&data[at..at + size], signed, big)));
            }
            b'f' => {
                let raw: [u8; 4] = data[at..at + 4].try_into().expect("4 bytes");
                let x = if big {
                    f32::from_be_bytes(raw)
                } else {
                    f32::from_le_bytes(raw)
                };
                values.push(Value::Number(f64::from(x)));
            }
            b'd' => {
                let raw: [u8; 8] = data[at..at + 8].try_into().expect("8 bytes");
                let x = if big {
                    f64::from_be_bytes(raw)
                } else {
                    f64::from_le_bytes(raw)
                };
                values.push(Value::Number(x));
            }
            b'c' => {
                if size == 0 {
                    // The length is the integer unpacked just before, which
                    // it replaces.
                    size = match values.pop() {
                        Some(Value::Number(n)) if n >= 0.0 => n as usize,
                        Some(Value::Number(_)) => return Err(too_short()),
                        _ => return Err(mlua::Error::runtime("format 'c0' needs a previous size")),
                    };
                    if !fits(at, size) {
                        return Err(too_short());
                    }
                }
                values.push(Value::String(lua.create_string(&data[at..at + size])?));
            }
            b's' => {
                let end = data[at..]
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or_else(|| mlua::Error::runtime("unfinished string in data"))?;
                values.push(Value::String(lua.create_string(&data[at..at + end])?));
                size = end + 1;
            }
            _ => {}
        }
        at += size;
    }
    values.push(Value::Integer(at as i64 + 1));
    Ok(MultiValue::from_vec(values))
}

/// `struct.size(format)`: the bytes `pack` makes of it, if fixed.
fn size(lua: &Lua, args: &[Value]) -> mlua::Result<i64> {
    let format = bytes(lua, args, 1, "size")?;
    let mut format = Format::new(&format, "size");
    let mut at = 0;
    while let Some(option) = format.next()? {
        at += format.padding(at, &option);
        match option.code {
            b's' => return Err(bad_argument(1, "size", "option 's' has no fixed size")),
            b'c' if option.size == 0 => return Err(bad_argument(1, "size", "option 'c0' has no fixed size")),
            _ => at += option.size,
        }
    }
    Ok(at as i64)
}

/// The `struct` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| lua.create_string(pack(lua, &args.into_vec())?))?,
    )?;
    table.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| unpack(lua, &args.into_vec()))?,
    )?;
    table.set(
        "size",
        lua.create_function(|lua, args: MultiValue| size(lua, &args.into_vec()))?,
    )?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("struct", library(&lua).unwrap()).unwrap();
        lua
    }

    /// The bytes of a script's string result.
    fn packed(script: &str) -> Vec<u8> {
        let lua = lua();
        lua.load(script).eval::<mlua::String>().unwrap().as_bytes().to_vec()
    }

    /// A script's table result, each item as Lua prints it.
    fn unpacked(script: &str) -> Vec<String> {
        let lua = lua();
        let t: Table = lua.load(script).eval().unwrap();
        t.sequence_values::<Value>()
            .map(|v| v.unwrap().to_string().unwrap())
            .collect()
    }

    fn failure(script: &str) -> String {
        lua_error(&lua().load(script).exec().unwrap_err())
    }

    fn lua_error(e: &mlua::Error) -> String {
        match e {
            mlua::Error::RuntimeError(m) => m.clone(),
            mlua::Error::CallbackError { cause, .. } => lua_error(cause),
            other => other.to_string(),
        }
    }

    // The expected values are redis-server 7.0.15's for the same scripts.

    #[test]
    fn pack_lays_out_bytes_as_redis_does() {
        assert_eq!(packed("return struct.pack('>i', 1)"), [0, 0, 0, 1]);
        assert_eq!(packed("return struct.pack('<i', -2)"), [0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(packed("return struct.pack('b', -1)"), [0xff]);
        assert_eq!(packed("return struct.pack('>I3', 65536 + 2)"), [1, 0, 2]);
        assert_eq!(packed("return struct.pack('>l', -1)"), [0xff; 8]);
        assert_eq!(packed("return struct.pack('>d', 1.5)"), [0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(packed("return struct.pack('<f', 0.5)"), [0, 0, 0, 0x3f]);
        assert_eq!(packed("return struct.pack('s', 'ab')"), b"ab\0");
        assert_eq!(packed("return struct.pack('c3', 'abcd')"), b"abc");
        assert_eq!(packed("return struct.pack('c0', 'hello')"), b"hello");
        assert_eq!(packed("return struct.pack('!4 b i', 1, 2)"), [1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(packed("return struct.pack('b x h', 1, 2)"), [1, 0, 2, 0]);
        let mut wide = [0u8; 16];
        wide[8..].fill(0xff);
        assert_eq!(
            packed("return struct.pack('>i16', -1)"),
            wide,
            "the low 8 bytes, zeros above"
        );
        assert_eq!(
            packed("return struct.pack('>i', -3.7)"),
            [0xff, 0xff, 0xff, 0xfd],
            "toward zero"
        );
        assert_eq!(packed("return struct.pack('>B', 256)"), [0], "the low byte");
        assert_eq!(
            packed("return struct.pack('i', 1, 2)"),
            [1, 0, 0, 0],
            "extra values ignored"
        );
    }

    #[test]
    fn unpack_reads_back_with_the_next_position() {
        assert_eq!(
            unpacked("return {struct.unpack('>i', struct.pack('>i', -5))}"),
            ["-5", "5"]
        );
        assert_eq!(
            unpacked("return {struct.unpack('<I', struct.pack('<I', 4294967295))}"),
            ["4294967295", "5"]
        );
        assert_eq!(unpacked("return {struct.unpack('>h', 'ab')}"), ["24930", "3"]);
        assert_eq!(unpacked("return {struct.unpack('s', 'abc\\0def\\0')}"), ["abc", "5"]);
        assert_eq!(unpacked("return {struct.unpack('c2', 'xyz')}"), ["xy", "3"]);
        assert_eq!(unpacked("return {struct.unpack('B c0', '\\3abcdef')}"), ["abc", "5"]);
        assert_eq!(
            unpacked("return {struct.unpack('!4 b i', struct.pack('!4 b i', 1, 2))}"),
            ["1", "2", "9"]
        );
        assert_eq!(
            unpacked("return {struct.unpack('>d', struct.pack('>d', 1.5))}"),
            ["1.5", "9"]
        );
        assert_eq!(unpacked("return {struct.unpack('b', 'ab', 2)}"), ["98", "3"]);
        assert_eq!(unpacked("return {struct.unpack('>i2', '\\255\\255')}"), ["-1", "3"]);
        assert_eq!(
            unpacked("return {struct.unpack('<i3', '\\0\\0\\128')}"),
            ["-8388608", "4"]
        );
        assert_eq!(unpacked("return {struct.unpack('i0', 'a')}"), ["0", "1"]);
        assert_eq!(packed("return struct.pack('i0', 5)"), b"");
    }

    #[test]
    fn size_counts_the_padding() {
        let size = |f: &str| lua().load(format!("return struct.size('{f}')")).eval::<i64>().unwrap();
        assert_eq!(size(">i h !8 d"), 16);
        assert_eq!(size("!4 b i"), 8);
        assert_eq!(size("c10"), 10);
    }

    proptest::proptest! {
        /// Any format over any data packs, unpacks and sizes to a value or
        /// an error, never a panic; what is packed unpacks to as many
        /// values as were given.
        #[test]
        fn any_format_is_a_value_or_an_error(
            format in "[<>!0-9 bBhHlLTiIfdscx]{0,12}",
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            start in 0i64..50,
        ) {
            let lua = lua();
            let data = lua.create_string(&data).unwrap();
            let args = |extra: Vec<Value>| {
                let mut all = vec![Value::String(lua.create_string(&format).unwrap())];
                all.extend(extra);
                all
            };
            let _ = size(&lua, &args(Vec::new()));
            let _ = unpack(&lua, &args(vec![Value::String(data.clone()), Value::Integer(start)]));
            let numbers = (0..12).map(|i| Value::Integer(i * 7 - 20)).collect();
            let _ = pack(&lua, &args(numbers));
            let texts = (0..12).map(|_| Value::String(data.clone())).collect();
            if let Ok(packed) = pack(&lua, &args(texts)) {
                let back = unpack(&lua, &args(vec![Value::String(lua.create_string(&packed).unwrap())]));
                proptest::prop_assert!(back.is_ok() || format.contains('c') || format.contains('s'), "{format:?}: {back:?}");
            }
        }
    }

    #[test]
    fn bad_formats_and_data_are_named_as_redis_names_them() {
        let cases = [
            (
                "struct.size('s')",
                "bad argument #1 to 'size' (option 's' has no fixed size)",
            ),
            (
                "struct.size('c0')",
                "bad argument #1 to 'size' (option 'c0' has no fixed size)",
            ),
            (
                "struct.pack('z', 1)",
                "bad argument #1 to 'pack' (invalid format option 'z')",
            ),
            ("struct.pack('i33', 1)", "integral size 33 is larger than limit of 32"),
            ("struct.pack('i99999999999', 1)", "integral size overflow"),
            ("struct.pack('!3 i', 1)", "alignment 3 is not a power of 2"),
            ("struct.size('!0 i')", "alignment 0 is not a power of 2"),
            (
                "struct.unpack('>i', 'ab')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            ("struct.unpack('s', 'abc')", "unfinished string in data"),
            ("struct.unpack('c0', 'abc')", "format 'c0' needs a previous size"),
            (
                "struct.unpack('b', 'a', 0)",
                "bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            (
                "struct.pack('c5', 'ab')",
                "bad argument #3 to 'pack' (string too short)",
            ),
            (
                "struct.pack('i', 'x')",
                "bad argument #2 to 'pack' (number expected, got string)",
            ),
            (
                "struct.pack('i')",
                "bad argument #2 to 'pack' (number expected, got no value)",
            ),
            (
                "struct.unpack('B c0', '\\255a')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
        ];
        for (call, expected) in cases {
            assert_eq!(failure(call), expected, "{call}");
        }
    }
}
