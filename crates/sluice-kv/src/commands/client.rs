//! `CLIENT` and the names a connection gives itself, with Redis's replies:
//! `ID`, `SETNAME`, `GETNAME`, `SETINFO` (the library's name and version,
//! which redis-py and go-redis send on connecting) and `INFO` (this
//! connection's line). The name is the connection's own: it does not pick
//! the tenant, as `AUTH` does, so that made-up names cannot grow the
//! server's tenant table. `CLIENT LIST`, `KILL`, `PAUSE` and the other
//! subcommands that act across connections are refused by name.

use super::session::{valid, Session};
use crate::resp::Reply;

pub(crate) fn client(session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let sub = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let wrong = || Reply::error(format!("wrong number of arguments for 'client|{sub}' command"));
    match (sub.as_str(), &args[1..]) {
        ("id", []) => Reply::Integer(session.id as i64),
        ("setname", [name]) => match session.client.set_name(name) {
            Ok(()) => Reply::ok(),
            Err(refused) => refused,
        },
        ("getname", []) => Reply::Bulk(session.client.name.clone().map(String::into_bytes)),
        ("setinfo", [attr, value]) => {
            let attr = String::from_utf8_lossy(attr).to_ascii_lowercase();
            let Some(value) = valid(value) else {
                return Reply::error(format!("{attr} cannot contain spaces, newlines or special characters."));
            };
            let names = &mut session.client;
            match attr.as_str() {
                "lib-name" => names.lib_name = Some(value),
                "lib-ver" => names.lib_ver = Some(value),
                _ => return Reply::error(format!("Unrecognized option '{attr}'")),
            }
            Reply::ok()
        }
        ("info", []) => Reply::Bulk(Some(info(session).into_bytes())),
        ("id" | "setname" | "getname" | "setinfo" | "info", _) => wrong(),
        _ => Reply::error(format!(
            "unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// This connection's line of `CLIENT INFO`, with the fields Sluice keeps.
fn info(session: &Session) -> String {
    let names = &session.client;
    let addresses = session
        .addresses
        .map_or(String::new(), |(peer, local)| format!("addr={peer} laddr={local} "));
    format!(
        "id={} {addresses}name={} db=0 multi={} resp={} lib-name={} lib-ver={}\n",
        session.id,
        names.name.as_deref().unwrap_or(""),
        session.transaction.queued().map_or(-1, |n| n as i64),
        if session.resp3 { 3 } else { 2 },
        names.lib_name.as_deref().unwrap_or(""),
        names.lib_ver.as_deref().unwrap_or("")
    )
}
