//! Benchmark runs kept in SQLite, each with its whole JSON report (made here or imported from
//! `minerva bench --json` on another machine), listed newest first.

use crate::error::{Result, ServiceError};
use crate::store::{db_err, json_err, now_ms, Store};
use minerva_bench::report::{Report, SCHEMA_VERSION};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use std::path::Path;

/// A run as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchRunSummary {
    pub id: i64,
    /// Unix milliseconds: when it was stored.
    pub created_at: i64,
    pub model: String,
    pub backend: String,
    pub device: String,
    /// The formats' labels.
    pub formats: Vec<String>,
    pub interrupted: bool,
    pub imported: bool,
}

fn summary(id: i64, created_at: i64, imported: bool, r: &Report) -> BenchRunSummary {
    BenchRunSummary {
        id,
        created_at,
        model: r.settings.model.clone(),
        backend: r.settings.backend.clone(),
        device: r.machine.device.clone(),
        formats: r.formats.iter().map(|f| f.label.clone()).collect(),
        interrupted: r.interrupted,
        imported,
    }
}

/// A report read from a `minerva bench --json` file; the error names the file and what is
/// wrong with it.
pub fn read_report(path: &Path) -> Result<Report> {
    let bad = |what: String| ServiceError::Invalid(format!("{}: {what}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    // Reports are tens of kilobytes; a huge file is not one.
    if meta.len() > 64 << 20 {
        return Err(bad(format!(
            "{} bytes is too large for a bench report",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    match value["schema_version"].as_u64() {
        // Version 3 only let figures be null and added fields with defaults: a version 2
        // report reads as one.
        Some(v) if (2..=u64::from(SCHEMA_VERSION)).contains(&v) => {}
        Some(v) => {
            return Err(bad(format!(
                "a bench report of schema version {v}; this Minerva reads versions 2 to \
                 {SCHEMA_VERSION}"
            )))
        }
        None => return Err(bad("not a bench report (no schema_version)".into())),
    }
    serde_json::from_value(value).map_err(|e| bad(format!("not a bench report: {e}")))
}

impl Store {
    pub fn add_bench_run(&self, report: &Report, imported: bool) -> Result<BenchRunSummary> {
        let json = serde_json::to_string(report).map_err(json_err)?;
        let at = now_ms();
        let conn = self.conn();
        conn.execute(
            "INSERT INTO bench_runs (created_at, imported, report) VALUES (?1, ?2, ?3)",
            params![at, imported, json],
        )
        .map_err(db_err)?;
        Ok(summary(conn.last_insert_rowid(), at, imported, report))
    }

    /// Every run, newest first (a report that no longer parses is left out of the list).
    pub fn bench_runs(&self) -> Result<Vec<BenchRunSummary>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT id, created_at, imported, report FROM bench_runs ORDER BY id DESC")
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, at, imported, json) = row.map_err(db_err)?;
            if let Ok(report) = serde_json::from_str::<Report>(&json) {
                out.push(summary(id, at, imported, &report));
            }
        }
        Ok(out)
    }

    pub fn bench_run(&self, id: i64) -> Result<(BenchRunSummary, Report)> {
        let row: Option<(i64, bool, String)> = self
            .conn()
            .query_row(
                "SELECT created_at, imported, report FROM bench_runs WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(db_err)?;
        let (at, imported, json) =
            row.ok_or_else(|| ServiceError::Invalid(format!("no bench run {id}")))?;
        let report: Report = serde_json::from_str(&json).map_err(json_err)?;
        Ok((summary(id, at, imported, &report), report))
    }

    pub fn delete_bench_run(&self, id: i64) -> Result<()> {
        let n = self
            .conn()
            .execute("DELETE FROM bench_runs WHERE id = ?1", [id])
            .map_err(db_err)?;
        if n == 0 {
            return Err(ServiceError::Invalid(format!("no bench run {id}")));
        }
        Ok(())
    }
}
