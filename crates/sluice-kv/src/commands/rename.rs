//! RENAME and RENAMENX: a value of any type moves to another key with its
//! expiry. A sorted set's members and a list's elements are entries keyed
//! by the set's or list's version, not by its key (`keyspace.rs`), so they
//! stay where they are and the header alone moves; whatever the
//! destination held goes, its own entries with it.

use super::delete::clear_entries;
use super::store;
use super::value::{read, run, Typed};
use crate::keyspace::{tagged, with_deadline};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// `RENAME key newkey` (`nx`: `RENAMENX`, which leaves an existing
/// `newkey` alone and answers 0). A missing or expired `key` is "ERR no
/// such key"; a key renamed to itself stays as it is.
pub(super) fn rename(shared: &Shared, args: &[Vec<u8>], nx: bool) -> Reply {
    run(|| {
        let (from, to) = (&args[0], &args[1]);
        let _lock = store::lock(shared, [from.as_slice(), to.as_slice()]);
        let Typed::Found(tag, body, deadline) = read(shared, from)? else {
            return Err(Reply::error("no such key"));
        };
        let done = |moved: bool| {
            if nx {
                Reply::Integer(i64::from(moved))
            } else {
                Reply::ok()
            }
        };
        if from == to {
            return Ok(done(false));
        }
        if nx && matches!(read(shared, to)?, Typed::Found(..)) {
            return Ok(done(false));
        }
        let mut batch = WriteBatch::new();
        clear_entries(shared, to, &mut batch)?;
        batch.delete(from.clone());
        batch.put(to.clone(), with_deadline(tagged(tag, &body), deadline));
        store::write(shared, batch)?;
        Ok(done(true))
    })
}
