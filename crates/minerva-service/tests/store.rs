//! The SQLite store: migrations from an empty database and from every earlier schema version,
//! and a database from a newer Minerva refused. (A process killed in the middle of a reply:
//! crates/minerva-cli/tests/chat.rs.)

use minerva_service::store::{create_at_version, MIGRATIONS};
use minerva_service::{Role, Settings, Store};

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
