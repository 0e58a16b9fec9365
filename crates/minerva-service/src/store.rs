//! Conversations, their messages (with the stats and settings of each reply) and recent models
//! in SQLite: WAL, foreign keys, and schema migrations on `PRAGMA user_version`. A message is
//! written once, complete, in one transaction: a process killed mid-reply loses only that reply.

use crate::error::{Result, ServiceError};
use crate::settings::Settings;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Schema steps in order; step `i` takes `user_version` from `i` to `i + 1`. Never edit a step
/// that has shipped: add one.
pub const MIGRATIONS: &[&str] = &[
    // 1: conversations, messages, recent models. Ids are never reused (AUTOINCREMENT): a front
    // end may still hold the id of a deleted reply.
    "CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        model_path TEXT,
        settings TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE TABLE recent_models (
        path TEXT PRIMARY KEY,
        format TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        opened_at INTEGER NOT NULL
    );",
    // 2: a reply's reasoning, stats and the settings it was made with.
    "ALTER TABLE messages ADD COLUMN reasoning TEXT;
    ALTER TABLE messages ADD COLUMN stats TEXT;
    ALTER TABLE messages ADD COLUMN settings TEXT;",
    // 3: benchmark runs with their JSON report (made here or imported), and the app's settings.
    "CREATE TABLE bench_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at INTEGER NOT NULL,
        imported INTEGER NOT NULL,
        report TEXT NOT NULL
    );
    CREATE TABLE app_settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );",
];

/// How a reply went, as stored and shown under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub prompt_tokens: usize,
    /// Tokens computed for the prompt (those the KV cache did not hold).
    pub prefill_tokens: usize,
    pub generated_tokens: usize,
    pub time_to_first_token_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// stop, max_tokens, cancelled, context_full.
    pub stop_reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    fn parse(s: &str) -> Role {
        match s {
            "system" => Role::System,
            "user" => Role::User,
            _ => Role::Assistant,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub id: i64,
    pub title: String,
    pub model_path: Option<String>,
    pub settings: Settings,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub id: i64,
    pub conversation_id: i64,
    pub role: Role,
    pub content: String,
    pub reasoning: Option<String>,
    pub stats: Option<Stats>,
    pub created_at: i64,
}

/// A model opened before, most recent first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentModel {
    pub path: String,
    pub format: String,
    pub bytes: u64,
    pub opened_at: i64,
}

/// The database; one connection behind a lock (the app, the CLI and the server may each open
/// the same file: WAL and a busy timeout let them share it).
pub struct Store {
    conn: Mutex<Connection>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

pub(crate) fn db_err(e: rusqlite::Error) -> ServiceError {
    ServiceError::Database(e.to_string())
}

pub(crate) fn json_err(e: serde_json::Error) -> ServiceError {
    ServiceError::Database(format!("stored JSON: {e}"))
}

impl Store {
    /// Opens (or creates) the database at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| ServiceError::Database(format!("{}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path)
            .map_err(|e| ServiceError::Database(format!("{}: {e}", path.display())))?;
        Self::init(conn)
    }

    /// A database in memory (the command line's chats, tests).
    pub fn in_memory() -> Result<Store> {
        Self::init(Connection::open_in_memory().map_err(db_err)?)
    }

    fn init(conn: Connection) -> Result<Store> {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(db_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db_err)?;
        migrate(&conn)?;
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    pub(crate) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// SQLite's own check of the file: "ok" when it is sound.
    pub fn integrity(&self) -> Result<String> {
        self.conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(db_err)
    }

    /// The schema version of the open database.
    pub fn version(&self) -> Result<usize> {
        schema_version(&self.conn())
    }

    pub fn create_conversation(
        &self,
        title: &str,
        model_path: Option<&str>,
        settings: &Settings,
    ) -> Result<Conversation> {
        let now = now_ms();
        let json = serde_json::to_string(settings).map_err(json_err)?;
        let conn = self.conn();
        conn.execute(
            "INSERT INTO conversations (title, model_path, settings, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![title, model_path, json, now],
        )
        .map_err(db_err)?;
        Ok(Conversation {
            id: conn.last_insert_rowid(),
            title: title.to_string(),
            model_path: model_path.map(str::to_string),
            settings: settings.clone(),
            created_at: now,
            updated_at: now,
        })
    }

    /// Conversations whose title contains `query` (all when None), most recently used first.
    pub fn conversations(&self, query: Option<&str>) -> Result<Vec<Conversation>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT id, title, model_path, settings, created_at, updated_at FROM conversations
                 WHERE ?1 IS NULL OR instr(lower(title), lower(?1)) > 0
                 ORDER BY updated_at DESC, id DESC",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![query], conversation_row)
            .map_err(db_err)?;
        rows.map(|r| r.map_err(db_err).and_then(|c| c)).collect()
    }

    pub fn conversation(&self, id: i64) -> Result<Conversation> {
        self.conn()
            .query_row(
                "SELECT id, title, model_path, settings, created_at, updated_at FROM conversations
                 WHERE id = ?1",
                params![id],
                conversation_row,
            )
            .optional()
            .map_err(db_err)?
            .ok_or(ServiceError::NoSuchConversation(id))?
    }

    pub fn rename_conversation(&self, id: i64, title: &str) -> Result<()> {
        self.touch(id, "title", title)
    }

    pub fn set_settings(&self, id: i64, settings: &Settings) -> Result<()> {
        let json = serde_json::to_string(settings).map_err(json_err)?;
        self.touch(id, "settings", &json)
    }

    pub fn set_model(&self, id: i64, model_path: &str) -> Result<()> {
        self.touch(id, "model_path", model_path)
    }

    fn touch(&self, id: i64, column: &'static str, value: &str) -> Result<()> {
        let n = self
            .conn()
            .execute(
                &format!("UPDATE conversations SET {column} = ?1, updated_at = ?2 WHERE id = ?3"),
                params![value, now_ms(), id],
            )
            .map_err(db_err)?;
        if n == 0 {
            return Err(ServiceError::NoSuchConversation(id));
        }
        Ok(())
    }

    /// Deletes a conversation and its messages.
    pub fn delete_conversation(&self, id: i64) -> Result<()> {
        let n = self
            .conn()
            .execute("DELETE FROM conversations WHERE id = ?1", params![id])
            .map_err(db_err)?;
        if n == 0 {
            return Err(ServiceError::NoSuchConversation(id));
        }
        Ok(())
    }

    /// Appends a complete message (and marks the conversation used), in one transaction.
    pub fn add_message(
        &self,
        conversation_id: i64,
        role: Role,
        content: &str,
        reasoning: Option<&str>,
        stats: Option<&Stats>,
        settings: Option<&Settings>,
    ) -> Result<Message> {
        let now = now_ms();
        let stats_json = stats
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        let settings_json = settings
            .map(serde_json::to_string)
            .transpose()
            .map_err(json_err)?;
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let touched = tx
            .execute(
                "UPDATE conversations SET updated_at = ?1 WHERE id = ?2",
                params![now, conversation_id],
            )
            .map_err(db_err)?;
        if touched == 0 {
            return Err(ServiceError::NoSuchConversation(conversation_id));
        }
        tx.execute(
            "INSERT INTO messages (conversation_id, role, content, reasoning, stats, settings, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![conversation_id, role.as_str(), content, reasoning, stats_json, settings_json, now],
        )
        .map_err(db_err)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(db_err)?;
        Ok(Message {
            id,
            conversation_id,
            role,
            content: content.to_string(),
            reasoning: reasoning.map(str::to_string),
            stats: stats.cloned(),
            created_at: now,
        })
    }

    pub fn messages(&self, conversation_id: i64) -> Result<Vec<Message>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT id, conversation_id, role, content, reasoning, stats, created_at
                 FROM messages WHERE conversation_id = ?1 ORDER BY id",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![conversation_id], |r| {
                let stats: Option<String> = r.get(5)?;
                Ok((
                    Message {
                        id: r.get(0)?,
                        conversation_id: r.get(1)?,
                        role: Role::parse(&r.get::<_, String>(2)?),
                        content: r.get(3)?,
                        reasoning: r.get(4)?,
                        stats: None,
                        created_at: r.get(6)?,
                    },
                    stats,
                ))
            })
            .map_err(db_err)?;
        rows.map(|r| {
            let (mut m, stats) = r.map_err(db_err)?;
            m.stats = stats
                .map(|s| serde_json::from_str(&s))
                .transpose()
                .map_err(json_err)?;
            Ok(m)
        })
        .collect()
    }

    pub fn message(&self, id: i64) -> Result<Message> {
        let conversation_id: i64 = self
            .conn()
            .query_row(
                "SELECT conversation_id FROM messages WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?
            .ok_or(ServiceError::NoSuchMessage(id))?;
        self.messages(conversation_id)?
            .into_iter()
            .find(|m| m.id == id)
            .ok_or(ServiceError::NoSuchMessage(id))
    }

    /// Replaces a message's text and deletes every message after it, in one transaction.
    pub fn rewrite_from(&self, message_id: i64, content: &str) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let conversation_id: i64 = tx
            .query_row(
                "SELECT conversation_id FROM messages WHERE id = ?1",
                params![message_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?
            .ok_or(ServiceError::NoSuchMessage(message_id))?;
        tx.execute(
            "UPDATE messages SET content = ?1 WHERE id = ?2",
            params![content, message_id],
        )
        .map_err(db_err)?;
        tx.execute(
            "DELETE FROM messages WHERE conversation_id = ?1 AND id > ?2",
            params![conversation_id, message_id],
        )
        .map_err(db_err)?;
        tx.commit().map_err(db_err)
    }

    /// Deletes one message (the last reply, before it is made again).
    pub fn delete_message(&self, id: i64) -> Result<()> {
        self.conn()
            .execute("DELETE FROM messages WHERE id = ?1", params![id])
            .map_err(db_err)?;
        Ok(())
    }

    /// Records that a model was opened.
    pub fn note_recent(&self, path: &str, format: &str, bytes: u64) -> Result<()> {
        self.conn()
            .execute(
                "INSERT INTO recent_models (path, format, bytes, opened_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(path) DO UPDATE SET format = ?2, bytes = ?3, opened_at = ?4",
                params![path, format, bytes as i64, now_ms()],
            )
            .map_err(db_err)?;
        Ok(())
    }

    pub fn recent_models(&self, limit: usize) -> Result<Vec<RecentModel>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT path, format, bytes, opened_at FROM recent_models
                 ORDER BY opened_at DESC LIMIT ?1",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![limit as i64], |r| {
                Ok(RecentModel {
                    path: r.get(0)?,
                    format: r.get(1)?,
                    bytes: r.get::<_, i64>(2)?.max(0) as u64,
                    opened_at: r.get(3)?,
                })
            })
            .map_err(db_err)?;
        rows.map(|r| r.map_err(db_err)).collect()
    }
}

type RowResult = rusqlite::Result<Result<Conversation>>;

/// A conversation row; its settings JSON may still fail to parse (the outer error is SQLite's).
fn conversation_row(r: &rusqlite::Row) -> RowResult {
    let settings: String = r.get(3)?;
    let (id, title, model_path, created_at, updated_at) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(4)?, r.get(5)?);
    Ok(serde_json::from_str(&settings)
        .map_err(json_err)
        .map(|settings| Conversation {
            id,
            title,
            model_path,
            settings,
            created_at,
            updated_at,
        }))
}

fn schema_version(conn: &Connection) -> Result<usize> {
    conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))
        .map(|v| v.max(0) as usize)
        .map_err(db_err)
}

/// Runs the steps the database lacks, each with its version bump in one transaction. A
/// database newer than this program is refused rather than guessed at.
fn migrate(conn: &Connection) -> Result<()> {
    let mut version = schema_version(conn)?;
    if version > MIGRATIONS.len() {
        return Err(ServiceError::Database(format!(
            "the database has schema version {version}; this Minerva knows up to {}",
            MIGRATIONS.len()
        )));
    }
    while version < MIGRATIONS.len() {
        let next = version + 1;
        conn.execute_batch(&format!(
            "BEGIN; {} PRAGMA user_version = {next}; COMMIT;",
            MIGRATIONS[version]
        ))
        .map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK;");
            ServiceError::Database(format!("migration to schema version {next}: {e}"))
        })?;
        version = next;
    }
    Ok(())
}

/// Brings a fresh database to `version` only (tests of the migrations from earlier schemas).
pub fn create_at_version(path: &Path, version: usize) -> Result<()> {
    let conn = Connection::open(path).map_err(db_err)?;
    for (i, step) in MIGRATIONS.iter().take(version).enumerate() {
        conn.execute_batch(&format!(
            "BEGIN; {step} PRAGMA user_version = {}; COMMIT;",
            i + 1
        ))
        .map_err(db_err)?;
    }
    Ok(())
}

/// Runs SQL on a database file as it is, without migrating it (tests of old schemas).
pub fn exec_raw(path: &Path, sql: &str) -> Result<()> {
    Connection::open(path)
        .and_then(|c| c.execute_batch(sql))
        .map_err(db_err)
}
