//! How commands read and write a key's value: by its type, an expired
//! value read as absent, a reserved key or a value this server did not
//! write refused by name.

use super::store;
use crate::keyspace::{check_user_key, decode_value, is_live, now_ms, Deadline, Tag, WRONGTYPE};
use crate::resp::Reply;
use crate::shared::Shared;

/// A stored value, read by its type; an expired value is `Absent`.
pub(crate) enum Typed {
    Absent,
    Found(Tag, Vec<u8>, Deadline),
}

/// The value at `key` as stored, expired or not; refuses reserved keys
/// and values this server did not write.
pub(crate) fn read_stored(shared: &Shared, key: &[u8]) -> Result<Option<(Tag, Vec<u8>, Deadline)>, Reply> {
    check_user_key(key).map_err(Reply::error)?;
    decode_stored(store::get(shared, key)?)
}

fn decode_stored(stored: Option<Vec<u8>>) -> Result<Option<(Tag, Vec<u8>, Deadline)>, Reply> {
    match stored {
        None => Ok(None),
        Some(v) => match decode_value(&v) {
            Some((tag, body, deadline)) => Ok(Some((tag, body.to_vec(), deadline))),
            None => Err(Reply::error("the value at this key was not written by sluice serve")),
        },
    }
}

fn live(stored: Option<(Tag, Vec<u8>, Deadline)>, now: u64) -> Typed {
    match stored {
        Some((tag, body, deadline)) if is_live(deadline, now) => Typed::Found(tag, body, deadline),
        _ => Typed::Absent,
    }
}

/// Reads `key` for a command: every command sees an expired key as
/// absent.
pub(crate) fn read(shared: &Shared, key: &[u8]) -> Result<Typed, Reply> {
    Ok(live(read_stored(shared, key)?, now_ms()))
}

/// The header of the collection of type `tag` at `key` (decoded by
/// `decode`) and its deadline; `None` if absent; WRONGTYPE if another type
/// is there, or an error naming `what` if the header does not decode.
pub(crate) fn read_header<M>(
    shared: &Shared,
    key: &[u8],
    tag: Tag,
    what: &str,
    decode: impl FnOnce(&[u8]) -> Option<M>,
) -> Result<Option<(M, Deadline)>, Reply> {
    match read(shared, key)? {
        Typed::Absent => Ok(None),
        Typed::Found(found, body, deadline) if found == tag => decode(&body)
            .map(|m| Some((m, deadline)))
            .ok_or_else(|| Reply::error(format!("damaged {what}"))),
        Typed::Found(..) => Err(Reply::Error(WRONGTYPE.into())),
    }
}

/// Reads `keys` as [`read`] does, all as of one moment, as Redis's
/// multi-key reads are.
pub(crate) fn read_many(shared: &Shared, keys: &[Vec<u8>]) -> Result<Vec<Typed>, Reply> {
    for k in keys {
        check_user_key(k).map_err(Reply::error)?;
    }
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let now = now_ms();
    store::get_many(shared, &keys)?
        .into_iter()
        .map(|stored| Ok(live(decode_stored(stored)?, now)))
        .collect()
}

/// A command's outcome, whichever way it ended.
pub(crate) fn run(f: impl FnOnce() -> Result<Reply, Reply>) -> Reply {
    f().unwrap_or_else(|e| e)
}

/// The string at `key` and its deadline, or WRONGTYPE.
pub(crate) fn string_with_deadline(shared: &Shared, key: &[u8]) -> Result<Option<(Vec<u8>, Deadline)>, Reply> {
    match read(shared, key)? {
        Typed::Absent => Ok(None),
        Typed::Found(Tag::String, body, deadline) => Ok(Some((body, deadline))),
        Typed::Found(..) => Err(Reply::Error(WRONGTYPE.into())),
    }
}

/// The string at `key`, or WRONGTYPE.
pub(crate) fn string(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    Ok(string_with_deadline(shared, key)?.map(|(body, _)| body))
}
