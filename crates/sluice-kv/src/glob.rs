//! Redis's glob patterns (KEYS, SCAN's MATCH, PSUBSCRIBE), matched as
//! Redis matches them: written here because no crate has Redis's corner
//! cases (an unclosed class, ranges compared as signed chars, the nesting
//! limit), which clients' patterns can reach.

/// Whether `string` matches the glob `pattern` (`*`, `?`, `[abc]`,
/// `[^a-z]`, `\x`), exactly as Redis's `stringmatchlen` decides, its
/// corner cases included: an unclosed `[` class runs to the end of the
/// pattern, a range's ends compare as C's signed chars, and matching gives
/// up past 1000 nested `*`.
pub(crate) fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    glob(pattern, string, &mut skip_longer, 0)
}

fn glob(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: u32) -> bool {
    if nesting > 1000 {
        return false;
    }
    while let (Some(&pc), Some(&sc)) = (p.first(), s.first()) {
        match pc {
            b'*' => {
                while p.get(1) == Some(&b'*') {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if glob(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    // The rest of the pattern matches nowhere in the rest
                    // of the string: a longer match for an earlier `*`
                    // cannot help either.
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => p = &p[1..],
            b'[' => {
                p = &p[1..];
                let negated = p.first() == Some(&b'^');
                if negated {
                    p = &p[1..];
                }
                let mut hit = false;
                loop {
                    match p {
                        [] => break,
                        [b'\\', escaped, ..] => {
                            hit |= *escaped == sc;
                            p = &p[2..];
                        }
                        [b']', ..] => {
                            p = &p[1..];
                            break;
                        }
                        [lo, b'-', hi, ..] => {
                            let (lo, hi) = ((*lo as i8).min(*hi as i8), (*lo as i8).max(*hi as i8));
                            hit |= (lo..=hi).contains(&(sc as i8));
                            p = &p[3..];
                        }
                        [c, ..] => {
                            hit |= *c == sc;
                            p = &p[1..];
                        }
                    }
                }
                if hit == negated {
                    return false;
                }
            }
            b'\\' if p.len() >= 2 => {
                if p[1] != sc {
                    return false;
                }
                p = &p[2..];
            }
            _ => {
                if pc != sc {
                    return false;
                }
                p = &p[1..];
            }
        }
        s = &s[1..];
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
        }
    }
    p.is_empty() && s.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_redis_matches_them() {
        for (pattern, string, want) in [
            ("*", "anything", true),
            ("", "", true),
            ("", "a", false),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "hllo", true),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("[\\]]", "]", true),
            ("[a-]", "]", true),
            ("[abc", "b", true),
            ("[abc", "bx", false),
            ("ab\\", "ab\\", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("user:*", "user:1", true),
            ("*:1", "user:1", true),
            ("a**", "a", true),
        ] {
            assert_eq!(
                glob_match(pattern.as_bytes(), string.as_bytes()),
                want,
                "{pattern:?} {string:?}"
            );
        }
        // A range's ends are C's signed chars: 0x01-0xff is 0xff..=0x01.
        assert!(glob_match(b"[\x01-\xff]", b"\x00"));
        assert!(!glob_match(b"[\x01-\xff]", b"a"));
        // Matching gives up past 1000 nested stars, as Redis does.
        assert!(glob_match("a*".repeat(10).as_bytes(), &[b'a'; 10]));
        assert!(!glob_match("a*".repeat(1100).as_bytes(), &[b'a'; 1100]));
    }
}
