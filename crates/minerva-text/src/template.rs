//! Chat templates: Jinja templates from tokenizer_config.json, chat_template.jinja or a GGUF's
//! `tokenizer.chat_template`, rendered with minijinja the way transformers renders them
//! (trim_blocks, lstrip_blocks, Python string/dict methods, `raise_exception`, `tojson`).

use crate::error::{Result, TextError};
use crate::hf_config;
use minerva_formats::{Checkpoint, Format, Metadata};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
    pub fn system(content: impl Into<String>) -> Message {
        Message::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::new("assistant", content)
    }
}

/// Instructions a template may execute before it is stopped (a template that loops forever
/// fails with an "out of fuel" error instead of hanging). Real templates use a few thousand
/// per message.
const TEMPLATE_FUEL: u64 = 20_000_000;
/// Nesting depth of macros, includes and loops.
const TEMPLATE_RECURSION: usize = 200;

/// A compiled chat template with the BOS/EOS text it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    origin: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .finish()
    }
}

fn template_error(origin: &str, e: &Error) -> TextError {
    let mut what = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        what.push_str(&format!(": {s}"));
        source = s.source();
    }
    TextError::Template {
        origin: origin.to_owned(),
        what,
    }
}

impl ChatTemplate {
    /// Compiles `source`; `origin` names where it came from in messages.
    pub fn new(
        source: &str,
        origin: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_recursion_limit(TEMPLATE_RECURSION);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| template_error(origin, &e))?;
        Ok(ChatTemplate {
            env,
            origin: origin.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The model's chat template, or None when it has none.
    pub fn from_checkpoint(ckpt: &Checkpoint) -> Result<Option<ChatTemplate>> {
        match ckpt.format {
            Format::Gguf => ChatTemplate::from_gguf_metadata(
                &ckpt.metadata,
                &ckpt.main_path().display().to_string(),
            ),
            Format::Safetensors | Format::Mlx => ChatTemplate::from_folder(&ckpt.dir),
        }
    }

    /// chat_template.jinja (preferred, as transformers does) or tokenizer_config.json's
    /// `chat_template`, with BOS/EOS text from tokenizer_config.json / special_tokens_map.json.
    pub fn from_folder(dir: &Path) -> Result<Option<ChatTemplate>> {
        let specials = hf_config::read_folder_specials(dir)?;
        let file = dir.join("chat_template.jinja");
        let (source, origin) = if file.is_file() {
            let s = std::fs::read_to_string(&file).map_err(|e| TextError::Io {
                path: file.clone(),
                source: e,
            })?;
            (s, file.display().to_string())
        } else if let Some(s) = specials.chat_template.clone() {
            (s, dir.join("tokenizer_config.json").display().to_string())
        } else {
            return Ok(None);
        };
        let bos = specials.bos_token.unwrap_or_default();
        let eos = specials.eos_token.unwrap_or_default();
        ChatTemplate::new(&source, &origin, &bos, &eos).map(Some)
    }

    /// `tokenizer.chat_template` of a GGUF, with BOS/EOS text from its vocabulary.
    pub fn from_gguf_metadata(meta: &Metadata, origin: &str) -> Result<Option<ChatTemplate>> {
        let Some(v) = meta.get("tokenizer.chat_template") else {
            return Ok(None);
        };
        let source = v.as_str().ok_or_else(|| {
            TextError::malformed(
                origin,
                format!(
                    "tokenizer.chat_template is a {}, not a string",
                    v.type_name()
                ),
            )
        })?;
        let tokens = meta
            .get_str_array("tokenizer.ggml.tokens")
            .unwrap_or_default();
        let text = |key: &str| {
            meta.get_u64(key)
                .and_then(|id| tokens.get(usize::try_from(id).ok()?).copied())
                .unwrap_or_default()
        };
        let origin = format!("{origin} (tokenizer.chat_template)");
        let bos = text("tokenizer.ggml.bos_token_id");
        let eos = text("tokenizer.ggml.eos_token_id");
        ChatTemplate::new(source, &origin, bos, eos).map(Some)
    }

    /// The prompt for `messages`; with `add_generation_prompt` it ends where the assistant's
    /// reply begins.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, Value::from(()))
    }

    /// As `render`, with extra variables for the template (e.g. `{"reasoning_effort": "low"}`).
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        extra: Value,
    ) -> Result<String> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| template_error(&self.origin, &e))?;
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            ..extra
        };
        template
            .render(ctx)
            .map_err(|e| template_error(&self.origin, &e))
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// The prompt used when a model has no chat template: one `Role: content` paragraph per
/// message, and `Assistant:` to ask for the reply. Plain text, no special tokens.
pub fn render_plain(messages: &[Message], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    for m in messages {
        let mut role = m.role.chars();
        if let Some(first) = role.next() {
            out.extend(first.to_uppercase());
            out.push_str(role.as_str());
        }
        out.push_str(": ");
        out.push_str(&m.content);
        out.push_str("\n\n");
    }
    if add_generation_prompt {
        out.push_str("Assistant:");
    }
    out
}

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("template raised: {message}"),
    ))
}

/// Today's UTC date/time in a strftime format (the subset real templates use:
/// %Y %m %d %e %b %B %a %A %H %M %S %%).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_unix_time(secs, &format)
}

fn format_unix_time(secs: u64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month_name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `tojson` as transformers defines it: Python's json.dumps with non-ASCII kept and
/// `", "` / `": "` separators (no HTML escaping), optional `indent`.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    for unused in ["ensure_ascii", "separators", "sort_keys"] {
        let _: Option<Value> = kwargs.get(unused)?;
    }
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    v: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> std::result::Result<(), Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&v.to_string()),
        ValueKind::String => {
            out.push_str(&serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default())
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                out.push_str(&serde_json::to_string(&k.to_string()).unwrap_or_default());
                out.push_str(": ");
                write_json(&v.get_item(k)?, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                write_json(item, indent, level + 1, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        _ => out.push_str(&serde_json::to_string(&v.to_string()).unwrap_or_default()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, messages: &[Message]) -> Result<String> {
        ChatTemplate::new(src, "test", "<s>", "</s>")?.render(messages, true)
    }

    #[test]
    fn python_methods_and_loop_controls_work() {
        let src = "{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}\
                   {{ m.content.strip().split(' ')[0] }}{% if m.content.startswith(' a') %}!{% endif %}\
                   {% for k, v in {'x': 1}.items() %}{{ k }}={{ v }}{% endfor %};{% endfor %}";
        let out = render(
            src,
            &[
                Message::user(" alpha beta "),
                Message::new("skip", "no"),
                Message::user("gamma"),
            ],
        )
        .unwrap();
        assert_eq!(out, "alpha!x=1;gammax=1;");
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let out = render(
            "{{ {'a': [1, 'é<>'], 'b': none, 'c': true} | tojson }}",
            &[],
        )
        .unwrap();
        assert_eq!(out, r#"{"a": [1, "é<>"], "b": null, "c": true}"#);
        let out = render("{{ [1, {'k': 'v'}] | tojson(indent=2) }}", &[]).unwrap();
        assert_eq!(out, "[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]");
    }

    #[test]
    fn trim_and_lstrip_blocks_as_transformers() {
        // Expected output from Jinja2 with trim_blocks and lstrip_blocks.
        let src = "{% for m in messages %}\n    {% if m %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}";
        assert_eq!(
            render(src, &[Message::user("a"), Message::user("b")]).unwrap(),
            "a\nb\n"
        );
    }

    #[test]
    fn raise_exception_is_a_clear_error() {
        let err = render(
            "{{ raise_exception('Only user and assistant roles are supported!') }}",
            &[],
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("Only user and assistant roles are supported!"),
            "{msg}"
        );
        assert!(msg.contains("chat template (test)"), "{msg}");
    }

    #[test]
    fn endless_templates_stop_with_an_error() {
        let looped = render(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            &[],
        );
        assert!(looped.unwrap_err().to_string().contains("fuel"));
        let recursive = render(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            &[],
        );
        assert!(recursive.unwrap_err().to_string().contains("recursion"));
    }

    #[test]
    fn syntax_errors_are_reported_at_load() {
        let err = ChatTemplate::new("{% for m in messages %}", "broken.jinja", "", "").unwrap_err();
        assert!(err.to_string().contains("broken.jinja"), "{err}");
    }

    #[test]
    fn plain_fallback_names_roles() {
        let out = render_plain(&[Message::system("Be brief."), Message::user("Hi")], true);
        assert_eq!(out, "System: Be brief.\n\nUser: Hi\n\nAssistant:");
    }

    #[test]
    fn dates_format_like_strftime() {
        // 2024-07-26 12:34:56 UTC, a Friday.
        assert_eq!(
            format_unix_time(1_721_997_296, "%d %b %Y %A %H:%M:%S %%"),
            "26 Jul 2024 Friday 12:34:56 %"
        );
        assert_eq!(format_unix_time(0, "%Y-%m-%d %a"), "1970-01-01 Thu");
    }
}
