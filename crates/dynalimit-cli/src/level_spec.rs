//! What `limits set` reads for one level: its limits and its attributes, in the text form,
//! the YAML form and the JSON document `limits get --output json` prints.
//!
//! Besides its limits a level holds `disabled` (`true`, `false` or `bypass`) and a cascade
//! policy (`true` or `false`); the system level holds `on_unavailable` (`allow` or `block`)
//! instead. `null` clears one (the level inherits). Each form names them by their key:
//!
//! ```text
//! rpm=100/min,tpm=10000/min,disabled=bypass,cascade=false      the text form
//! ```
//!
//! ```yaml
//! rpm: 100/min                                                 # the YAML form
//! disabled: bypass
//! cascade: false
//! ```
//!
//! ```json
//! {"level": "resource gpt-4", "limits": ["rpm=100/min"], "disabled": "bypass",
//!  "cascade": false, "on_unavailable": null}
//! ```
//!
//! The three names are reserved limit names (attributes of the table's items), so none is
//! ever read as a limit. The text and YAML forms change what they name: the limits given
//! replace the level's limits, an attribute given replaces its value, and what is not given
//! is kept (attributes alone keep the limits). The JSON document is the whole level: its
//! limits (an empty list removes them), and every attribute it leaves out or sets to null is
//! cleared. A document is told from the YAML form by its `limits` list; its `level`, when
//! present, must be the level the command addresses.
//!
//! Everything is checked before the table is opened: a bad value, an attribute given twice
//! or at a level that has none, a document of another level or with an unknown key is a
//! [`LevelError`], and nothing is written.

use dynalimit_core::Limit;
use dynalimit_format::attr;
use dynalimit_repository::{DisabledFlag, OnUnavailable};
use serde_yaml_ng::{Mapping, Value};

use crate::limit_spec::{
    cascade_value, disabled_value, limits_of_mapping, on_unavailable_value, parse_limit,
    split_top_level,
};

/// Why `limits set` refuses what it was given. Every one is found before anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LevelError {
    /// A limit that does not parse, or limits one bucket cannot carry together.
    #[error("{0}")]
    Limit(String),
    /// An attribute's value is not one it may take.
    #[error("{message}, got {given}")]
    Value {
        /// What the value may be.
        message: &'static str,
        /// What was given.
        given: String,
    },
    /// An attribute named twice (in the text or file, or there and in `--on-unavailable`).
    #[error("{0} is given twice")]
    Twice(&'static str),
    /// An attribute the addressed level does not hold.
    #[error("{attribute} cannot be set on level {level}: {why}")]
    NotAtLevel {
        /// The attribute.
        attribute: &'static str,
        /// The level, as `limits get` names it.
        level: String,
        /// Which levels hold it.
        why: &'static str,
    },
    /// A document `limits get` printed for another level.
    #[error(
        "the document is for level {document:?} and the command sets level {command:?}; remove \
         its `level` key to set it here"
    )]
    OtherLevel {
        /// The level the document names.
        document: String,
        /// The level the command addresses.
        command: String,
    },
    /// A file that is neither the YAML form nor a document of the right shape.
    #[error("{0}")]
    Shape(String),
    /// Nothing to set.
    #[error("no limits given")]
    Empty,
    /// `on_unavailable` for a system level that would hold no limits.
    #[error("on_unavailable is stored with the system level's limits: give it at least one limit")]
    UnavailableWithoutLimits,
}

/// One attribute of a level besides its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attribute {
    Disabled,
    Cascade,
    OnUnavailable,
}

impl Attribute {
    const ALL: [Attribute; 3] = [
        Attribute::Disabled,
        Attribute::Cascade,
        Attribute::OnUnavailable,
    ];

    fn name(self) -> &'static str {
        match self {
            Attribute::Disabled => "disabled",
            Attribute::Cascade => "cascade",
            Attribute::OnUnavailable => "on_unavailable",
        }
    }

    fn named(name: &str) -> Option<Attribute> {
        Attribute::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// What `limits set` was given for one level. `None` keeps what the level holds;
/// `Some(None)` clears an attribute.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LevelInput {
    /// The level a document names (`limits get`'s `level`), when it names one.
    pub(crate) level: Option<String>,
    /// The limits; `Some(empty)` (a document only) removes them.
    pub(crate) limits: Option<Vec<Limit>>,
    /// The `disabled` value.
    pub(crate) disabled: Option<Option<DisabledFlag>>,
    /// The cascade policy.
    pub(crate) cascade: Option<Option<bool>>,
    /// The system level's `on_unavailable`.
    pub(crate) on_unavailable: Option<Option<OnUnavailable>>,
}

impl LevelInput {
    /// Records `attribute` as given with `value`.
    fn give(&mut self, attribute: Attribute, value: &Value) -> Result<(), LevelError> {
        let bad = |message| LevelError::Value {
            message,
            given: shown(value),
        };
        let twice = |given: bool| {
            if given {
                Err(LevelError::Twice(attribute.name()))
            } else {
                Ok(())
            }
        };
        match attribute {
            Attribute::Disabled => {
                twice(self.disabled.is_some())?;
                self.disabled = Some(disabled_value(value).map_err(bad)?);
            }
            Attribute::Cascade => {
                twice(self.cascade.is_some())?;
                self.cascade = Some(cascade_value(value).map_err(bad)?);
            }
            Attribute::OnUnavailable => {
                twice(self.on_unavailable.is_some())?;
                self.on_unavailable = Some(on_unavailable_value(value).map_err(bad)?);
            }
        }
        Ok(())
    }

    /// Adds `--on-unavailable`, refused when the text or file gives it too.
    pub(crate) fn with_on_unavailable(
        mut self,
        flag: Option<OnUnavailable>,
    ) -> Result<LevelInput, LevelError> {
        if let Some(o) = flag {
            if self.on_unavailable.is_some() {
                return Err(LevelError::Twice("on_unavailable"));
            }
            self.on_unavailable = Some(Some(o));
        }
        Ok(self)
    }

    /// The input checked against the level it is for (`level`, as `limits get` names it;
    /// `system` for the system level): a document of another level, and an attribute the
    /// level does not hold, are refused. Such an attribute given as null is dropped: it is
    /// what `limits get` prints for it.
    ///
    /// # Errors
    /// [`LevelError::OtherLevel`], [`LevelError::NotAtLevel`],
    /// [`LevelError::UnavailableWithoutLimits`].
    pub(crate) fn for_level(mut self, level: &str, system: bool) -> Result<LevelInput, LevelError> {
        if let Some(document) = &self.level
            && document != level
        {
            return Err(LevelError::OtherLevel {
                document: document.clone(),
                command: level.to_owned(),
            });
        }
        let not_here = |attribute: Attribute, why| LevelError::NotAtLevel {
            attribute: attribute.name(),
            level: level.to_owned(),
            why,
        };
        if system {
            if matches!(self.disabled, Some(Some(_))) {
                return Err(not_here(
                    Attribute::Disabled,
                    "the system level has none; set it on a resource or an entity",
                ));
            }
            if matches!(self.cascade, Some(Some(_))) {
                return Err(not_here(
                    Attribute::Cascade,
                    "the system level has none; set it on a resource or an entity",
                ));
            }
            (self.disabled, self.cascade) = (None, None);
            if matches!(self.on_unavailable, Some(Some(_)))
                && self.limits.as_ref().is_some_and(Vec::is_empty)
            {
                return Err(LevelError::UnavailableWithoutLimits);
            }
        } else {
            if matches!(self.on_unavailable, Some(Some(_))) {
                return Err(not_here(
                    Attribute::OnUnavailable,
                    "only the system level (--system) holds it",
                ));
            }
            self.on_unavailable = None;
        }
        Ok(self)
    }
}

/// A value as an error message quotes it.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        _ => "a list or mapping".into(),
    }
}

/// The value of `text` after `name=` in the text form: `true`, `false` and `null` as
/// themselves, anything else as text.
fn scalar(text: &str) -> Value {
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        other => Value::String(other.to_owned()),
    }
}

/// The limits given, checked as one bucket's: [`attr::validate_limits`].
fn checked(limits: Vec<Limit>) -> Result<Vec<Limit>, LevelError> {
    attr::validate_limits(&limits).map_err(|e| LevelError::Limit(e.to_string()))?;
    Ok(limits)
}

fn limit_error(error: dynalimit_manifest::ManifestError) -> LevelError {
    LevelError::Limit(error.to_string())
}

/// Parses the text form: comma-separated limits and `NAME=VALUE` attributes.
///
/// # Errors
/// The first thing wrong; [`LevelError::Empty`] when nothing is given.
pub(crate) fn parse_text(text: &str) -> Result<LevelInput, LevelError> {
    let mut out = LevelInput::default();
    let mut limits = Vec::new();
    for item in split_top_level(text) {
        if item.trim().is_empty() {
            continue;
        }
        let attribute = item
            .split_once('=')
            .and_then(|(name, value)| Some((Attribute::named(name.trim())?, value.trim())));
        match attribute {
            Some((attribute, value)) => out.give(attribute, &scalar(value))?,
            None => limits.push(parse_limit(item).map_err(limit_error)?),
        }
    }
    if !limits.is_empty() {
        out.limits = Some(checked(limits)?);
    }
    nonempty(out)
}

fn nonempty(input: LevelInput) -> Result<LevelInput, LevelError> {
    if input.limits.is_none()
        && input.disabled.is_none()
        && input.cascade.is_none()
        && input.on_unavailable.is_none()
    {
        return Err(LevelError::Empty);
    }
    Ok(input)
}

/// Parses a file: the JSON document `limits get --output json` prints (a mapping whose
/// `limits` is a list), else the YAML form (limit names to limits, and the attributes).
///
/// # Errors
/// The first thing wrong; [`LevelError::Empty`] when nothing is given.
pub(crate) fn parse_file(text: &str) -> Result<LevelInput, LevelError> {
    let doc: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| LevelError::Shape(format!("neither YAML nor JSON: {e}")))?;
    let map = doc.as_mapping().ok_or_else(|| {
        LevelError::Shape(
            "the file must map limit names to limits (e.g. `rpm: 100/min`), or be the JSON \
             document `limits get --output json` prints"
                .into(),
        )
    })?;
    if map.get("limits").is_some_and(Value::is_sequence) {
        return document(map);
    }
    let mut out = LevelInput::default();
    let mut limits = Vec::new();
    for (key, value) in map {
        match key.as_str().and_then(Attribute::named) {
            Some(attribute) => out.give(attribute, value)?,
            None => limits.push((key, value)),
        }
    }
    let limits = limits_of_mapping(limits).map_err(limit_error)?;
    if !limits.is_empty() {
        out.limits = Some(checked(limits)?);
    }
    nonempty(out)
}

/// The keys of the JSON document.
const DOCUMENT_KEYS: &str = "level, limits, disabled, cascade, on_unavailable";

/// The JSON document: `level` (optional), `limits` (texts), and the attributes, each cleared
/// when left out.
fn document(map: &Mapping) -> Result<LevelInput, LevelError> {
    let mut out = LevelInput {
        disabled: Some(None),
        cascade: Some(None),
        on_unavailable: Some(None),
        ..LevelInput::default()
    };
    for (key, value) in map {
        let name = key.as_str().unwrap_or_default();
        match name {
            "level" => match value {
                Value::String(level) => out.level = Some(level.clone()),
                Value::Null => {}
                _ => return Err(LevelError::Shape("level must be text".into())),
            },
            "limits" => {
                let texts = value.as_sequence().into_iter().flatten();
                let limits = texts
                    .map(|t| {
                        let text = t.as_str().ok_or_else(|| {
                            LevelError::Shape(format!(
                                "limits must be a list of limits in the text form, got {}",
                                shown(t)
                            ))
                        })?;
                        parse_limit(text).map_err(limit_error)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                out.limits = Some(checked(limits)?);
            }
            other => {
                let attribute = Attribute::named(other).ok_or_else(|| {
                    LevelError::Shape(format!(
                        "unknown key {} in the document; expected one of: {DOCUMENT_KEYS}",
                        shown(key)
                    ))
                })?;
                // The defaults above stand for "left out"; the document names each once (a
                // YAML mapping has no key twice).
                match attribute {
                    Attribute::Disabled => out.disabled = None,
                    Attribute::Cascade => out.cascade = None,
                    Attribute::OnUnavailable => out.on_unavailable = None,
                }
                out.give(attribute, value)?;
            }
        }
    }
    let empty = out.limits.as_ref().is_some_and(Vec::is_empty)
        && out.disabled == Some(None)
        && out.cascade == Some(None)
        && out.on_unavailable == Some(None);
    if empty {
        return Err(LevelError::Shape(
            "the document holds no limits and no attribute: to remove the level, use limits \
             delete"
                .into(),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(limits: &Option<Vec<Limit>>) -> Vec<String> {
        limits
            .iter()
            .flatten()
            .map(crate::limit_spec::format_limit)
            .collect()
    }

    #[test]
    fn the_text_form_takes_attributes_beside_the_limits() {
        let input = parse_text("rpm=100/min, disabled=bypass,cascade=false").unwrap();
        assert_eq!(text(&input.limits), ["rpm=100/min"]);
        assert_eq!(input.disabled, Some(Some(DisabledFlag::Bypass)));
        assert_eq!(input.cascade, Some(Some(false)));
        assert_eq!(input.on_unavailable, None, "not given: kept");

        let input = parse_text("disabled=true").unwrap();
        assert_eq!(input.limits, None, "attributes alone keep the limits");
        assert_eq!(input.disabled, Some(Some(DisabledFlag::Disabled)));
        let input = parse_text("disabled=null,cascade=true,on_unavailable=block").unwrap();
        assert_eq!(input.disabled, Some(None), "null clears");
        assert_eq!(input.cascade, Some(Some(true)));
        assert_eq!(input.on_unavailable, Some(Some(OnUnavailable::Block)));

        for (bad, want) in [
            (
                "disabled=yes",
                LevelError::Value {
                    message: "disabled is true, false, bypass or null",
                    given: "\"yes\"".into(),
                },
            ),
            (
                "cascade=on",
                LevelError::Value {
                    message: "cascade is true, false or null",
                    given: "\"on\"".into(),
                },
            ),
            (
                "rpm=1/min,on_unavailable=maybe",
                LevelError::Value {
                    message: "on_unavailable is allow, block or null",
                    given: "\"maybe\"".into(),
                },
            ),
            ("cascade=true,cascade=false", LevelError::Twice("cascade")),
            ("", LevelError::Empty),
            (" , ", LevelError::Empty),
        ] {
            assert_eq!(parse_text(bad).unwrap_err(), want, "{bad}");
        }
        assert!(matches!(
            parse_text("rpm=ten/min,disabled=true"),
            Err(LevelError::Limit(_))
        ));
        assert!(matches!(
            parse_text("ttl=1/min"),
            Err(LevelError::Limit(m)) if m.contains("reserved")
        ));
    }

    #[test]
    fn the_yaml_form_takes_attributes_beside_the_limits() {
        let input = parse_file(
            "rpm: 100/min\ntpm: {rate: 5, soft: true}\ndisabled: false\ncascade: null\n",
        )
        .unwrap();
        assert_eq!(text(&input.limits), ["rpm=100/min", "tpm=5/min:soft"]);
        assert_eq!(input.disabled, Some(Some(DisabledFlag::Enabled)));
        assert_eq!(input.cascade, Some(None));
        assert_eq!(input.level, None);
        let input = parse_file("on_unavailable: allow\n").unwrap();
        assert_eq!(input.limits, None);
        assert_eq!(input.on_unavailable, Some(Some(OnUnavailable::Allow)));
        assert_eq!(
            parse_file("disabled: [1]\n").unwrap_err(),
            LevelError::Value {
                message: "disabled is true, false, bypass or null",
                given: "a list or mapping".into()
            }
        );
        assert_eq!(parse_file("{}").unwrap_err(), LevelError::Empty);
        assert!(matches!(parse_file("- a\n"), Err(LevelError::Shape(_))));
        assert!(matches!(
            parse_file("rpm: {rate: 1, cap: 2}\n"),
            Err(LevelError::Limit(m)) if m.contains("unknown field")
        ));
    }

    #[test]
    fn the_json_document_is_the_whole_level() {
        let doc = r#"{"cascade": true, "disabled": "bypass", "level": "resource gpt-4",
            "limits": ["rpm=100/min", "tok=5/quota:soft@Europe/Paris[0 0 1 * *]"],
            "on_unavailable": null}"#;
        let input = parse_file(doc).unwrap();
        assert_eq!(input.level.as_deref(), Some("resource gpt-4"));
        assert_eq!(
            text(&input.limits),
            ["rpm=100/min", "tok=5/quota:soft@Europe/Paris[0 0 1 * *]"]
        );
        assert_eq!(input.disabled, Some(Some(DisabledFlag::Bypass)));
        assert_eq!(input.cascade, Some(Some(true)));
        assert_eq!(input.on_unavailable, Some(None));

        // Left out is cleared; an empty list removes the limits.
        let input = parse_file(r#"{"limits": [], "disabled": true}"#).unwrap();
        assert_eq!(input.limits, Some(Vec::new()));
        assert_eq!(input.cascade, Some(None));
        assert_eq!(input.on_unavailable, Some(None));

        for (bad, needle) in [
            (
                r#"{"limits": ["rpm=100/min"], "cascades": true}"#,
                "unknown key",
            ),
            (r#"{"limits": [5]}"#, "list of limits in the text form"),
            (
                r#"{"limits": ["rpm=100/min"], "level": 3}"#,
                "level must be text",
            ),
            (r#"{"limits": [], "disabled": null}"#, "limits delete"),
            (r#"{"limits": ["a=1/min", "a=2/min"]}"#, "twice"),
            (
                r#"{"limits": ["rpm=1/min"], "disabled": "off"}"#,
                "bypass or null",
            ),
            ("{\"limits\": [\"rpm=1/min\"", "neither YAML nor JSON"),
        ] {
            let e = parse_file(bad).unwrap_err();
            assert!(e.to_string().contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn an_input_is_checked_against_its_level() {
        let doc = |level: &str| {
            parse_file(&format!(
                r#"{{"level": "{level}", "limits": ["rpm=1/min"], "disabled": null, "cascade": null, "on_unavailable": "block"}}"#
            ))
            .unwrap()
        };
        let system = doc("system").for_level("system", true).unwrap();
        assert_eq!(
            system.disabled, None,
            "null where the level has none: dropped"
        );
        assert_eq!(system.on_unavailable, Some(Some(OnUnavailable::Block)));
        assert_eq!(
            doc("system").for_level("resource r", false).unwrap_err(),
            LevelError::OtherLevel {
                document: "system".into(),
                command: "resource r".into()
            }
        );
        assert!(matches!(
            doc("resource r").for_level("resource r", false),
            Err(LevelError::NotAtLevel {
                attribute: "on_unavailable",
                ..
            })
        ));
        let resource = parse_file(r#"{"limits": ["rpm=1/min"], "cascade": false}"#).unwrap();
        let resource = resource.for_level("entity e on r", false).unwrap();
        assert_eq!(
            resource.on_unavailable, None,
            "null where the level has none: dropped"
        );
        assert_eq!(resource.cascade, Some(Some(false)));
        for text in ["disabled=true", "cascade=false"] {
            assert!(matches!(
                parse_text(text).unwrap().for_level("system", true),
                Err(LevelError::NotAtLevel { .. })
            ));
        }
        assert_eq!(
            parse_file(r#"{"limits": [], "on_unavailable": "allow"}"#)
                .unwrap()
                .for_level("system", true)
                .unwrap_err(),
            LevelError::UnavailableWithoutLimits
        );
        assert_eq!(
            parse_text("rpm=1/min,on_unavailable=allow")
                .unwrap()
                .with_on_unavailable(Some(OnUnavailable::Block))
                .unwrap_err(),
            LevelError::Twice("on_unavailable")
        );
    }
}
