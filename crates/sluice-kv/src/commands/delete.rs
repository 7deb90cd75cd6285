//! Deleting a value of any type: a sorted set's members and a list's
//! elements go with it.

use super::store;
use super::value::{read_stored, run};
use super::{list, zset};
use crate::keyspace::{is_live, now_ms, Tag};
use crate::resp::Reply;
use crate::shared::Shared;
use crate::WriteBatch;

/// Deletes the value `tag`, `body` stored at `key` (a sorted set's
/// members with it) into `batch`.
pub(crate) fn delete_value(
    shared: &Shared,
    key: &[u8],
    tag: Tag,
    body: &[u8],
    batch: &mut WriteBatch,
) -> Result<(), Reply> {
    match tag {
        Tag::Zset => zset::delete_members(shared, body, batch)?,
        Tag::List => list::delete_elements(body, batch)?,
        Tag::String | Tag::Hash => {}
    }
    batch.delete(key.to_vec());
    Ok(())
}

/// `DEL key [key ...]`: the number of live keys deleted, a key named
/// twice counted once. An expired value is deleted too, its space back,
/// but not counted, as in Redis.
pub(crate) fn del(shared: &Shared, keys: &[Vec<u8>]) -> Reply {
    run(|| {
        let _locks = store::lock(shared, keys.iter().map(Vec::as_slice));
        let mut batch = WriteBatch::new();
        let (mut existing, now) = (0, now_ms());
        let mut keys: Vec<&Vec<u8>> = keys.iter().collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let Some((tag, body, deadline)) = read_stored(shared, k)? else {
                continue;
            };
            existing += i64::from(is_live(deadline, now));
            delete_value(shared, k, tag, &body, &mut batch)?;
        }
        store::write(shared, batch)?;
        Ok(Reply::Integer(existing))
    })
}
