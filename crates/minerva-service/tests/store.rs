//! The SQLite store: migrations from an empty database and from every earlier schema version,
//! a database from a newer Minerva refused, and a process killed in the middle of a reply
//! losing only that reply.

mod common;

use minerva_service::store::{create_at_version, MIGRATIONS};
use minerva_service::{Role, Settings, Store};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn an_empty_database_gets_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("sub/minerva.sqlite")).unwrap();
    assert_eq!(store.version().unwrap(), MIGRATIONS.len());
    let c = store
        .create_conversation("t", Some("/m.gguf"), &Settings::default())
        .unwrap();
    store
        .add_message(c.id, Role::User, "hi", None, None, None)
        .unwrap();
    assert_eq!(store.messages(c.id).unwrap()[0].content, "hi");
}

#[test]
fn every_earlier_schema_is_brought_up_to_date_with_its_rows() {
    for version in 1..MIGRATIONS.len() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite");
        create_at_version(&path, version).unwrap();
        insert_as_first_schema(&path);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.version().unwrap(), MIGRATIONS.len(), "from {version}");
        let convs = store.conversations(None).unwrap();
        assert_eq!(convs.len(), 1, "from {version}");
        let messages = store.messages(convs[0].id).unwrap();
        assert_eq!(messages[0].content, "kept");
        assert_eq!(messages[0].stats, None);
    }
}

/// One conversation and message, written with the columns of the first schema (as an older
/// Minerva wrote them), without migrating the file.
fn insert_as_first_schema(path: &std::path::Path) {
    minerva_service::store::exec_raw(
        path,
        "INSERT INTO conversations (title, model_path, settings, created_at, updated_at)
         VALUES ('old', NULL, '{}', 1, 1);
         INSERT INTO messages (conversation_id, role, content, created_at)
         VALUES (1, 'user', 'kept', 1);",
    )
    .unwrap();
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.sqlite");
    create_at_version(&path, MIGRATIONS.len()).unwrap();
    minerva_service::store::exec_raw(&path, "PRAGMA user_version = 999;").unwrap();
    let err = Store::open(&path).err().unwrap().to_string();
    assert!(err.contains("999"), "{err}");
}

const CHILD: &str = "MINERVA_TEST_KILLED_CHILD_DB";

/// The child: a long reply on a conversation in the database file, announcing its first text.
#[test]
fn killed_child_role() {
    let Some(db) = std::env::var_os(CHILD) else {
        return;
    };
    let (svc, rx) = common::service(Store::open(std::path::Path::new(&db)).unwrap());
    svc.load_blocking(&common::tiny_model(), "cpu", Some(4096), &mut |_, _| true)
        .unwrap();
    let settings = Settings {
        max_tokens: 4000,
        seed: Some(3),
        backend: "cpu".into(),
        ..Settings::default()
    };
    let conv = svc.create_conversation(None, Some(settings)).unwrap();
    svc.send(conv.id, "Say a lot").unwrap();
    loop {
        if let minerva_service::ServiceEvent::Chat(_) = rx.recv().unwrap() {
            println!("streaming {}", conv.id);
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn a_process_killed_mid_reply_loses_only_that_reply() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("minerva.sqlite");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let conv_id: i64 = loop {
        let line = lines.next().expect("the child ended early").unwrap();
        // The harness prints the test's name on the same line.
        if let Some((_, id)) = line.split_once("streaming ") {
            break id.trim().parse().unwrap();
        }
    };
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();

    let store = Store::open(&db).unwrap();
    assert_eq!(store.integrity().unwrap(), "ok");
    let messages = store.messages(conv_id).unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].role, Role::User);
    assert_eq!(messages[0].content, "Say a lot");
    // The database takes new writes.
    store
        .add_message(conv_id, Role::User, "again", None, None, None)
        .unwrap();
}
