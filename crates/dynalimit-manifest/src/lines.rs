//! The line of a key or element of a YAML document, found by its path.
//!
//! The manifest is read into a `serde_yaml_ng::Value`, which keeps no positions. A refusal
//! names the path of what it refuses; its line is found by deserializing the text again with
//! a seed that walks the path and fails on the last key (or element): the parser then
//! reports where it was.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence element.
    Index(usize),
}

impl fmt::Display for Seg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// The path as text: `entities.key-1.resources.gpt-4.limits.rpm`, `schedule[1]`.
pub(crate) fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        if matches!(seg, Seg::Key(_)) && !out.is_empty() {
            out.push('.');
        }
        out.push_str(&seg.to_string());
    }
    out
}

/// The message of the walk's own failure.
const FOUND: &str = "\u{0}found";

/// The 1-based line of the last key (or element) of `path` in `text`; `None` when the path
/// is not there (or is empty).
pub(crate) fn line_of(text: &str, path: &[Seg]) -> Option<usize> {
    if path.is_empty() {
        return None;
    }
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Walk(path).deserialize(de) {
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| l.line()),
        _ => None,
    }
}

struct Walk<'a>(&'a [Seg]);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

fn missing<E: de::Error>() -> E {
    E::custom("not in the document")
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Seg::Key(first), rest)) = self.0.split_first() else {
            return Err(missing());
        };
        while let Some(hit) = map.next_key_seed(KeySeed {
            key: first,
            last: rest.is_empty(),
        })? {
            if hit {
                return map.next_value_seed(Walk(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(missing())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(at), rest)) = self.0.split_first() else {
            return Err(missing());
        };
        for _ in 0..*at {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(missing());
            }
        }
        if rest.is_empty() {
            seq.next_element_seed(Here)?;
            return Err(missing());
        }
        seq.next_element_seed(Walk(rest))?;
        Err(missing())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(missing())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(missing())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(missing())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(missing())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(missing())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(missing())
    }
}

/// Reads a key: true when it is the one sought and more path follows; the walk's failure
/// (at the key's position) when it is the last one sought.
struct KeySeed<'a> {
    key: &'a str,
    last: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        match (v == self.key, self.last) {
            (true, true) => Err(E::custom(FOUND)),
            (hit, _) => Ok(hit),
        }
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// Fails at the position of the value it is given.
struct Here;

impl<'de> DeserializeSeed<'de> for Here {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(HereVisitor)
    }
}

struct HereVisitor;

impl<'de> Visitor<'de> for HereVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(FOUND))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(FOUND))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(FOUND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Seg {
        Seg::Key(k.into())
    }

    const DOC: &str = "\
namespace: default
resources:
  gpt-4:
    limits:
      rpm: 100/min
      tpm:
        rate: 10000
        schedule:
          - {cron: \"* 9-17 * * *\", scale: 0.5}
          - cron: \"* 0-6 * * *\"
            burst: 5
entities: {key-1: {parent: proj-1}}
";

    #[test]
    fn keys_and_elements_are_found_on_their_lines() {
        let at = |path: &[Seg]| line_of(DOC, path);
        assert_eq!(at(&[key("namespace")]), Some(1));
        assert_eq!(at(&[key("resources"), key("gpt-4")]), Some(3));
        let tpm = [key("resources"), key("gpt-4"), key("limits"), key("tpm")];
        assert_eq!(at(&tpm[..3]), Some(4));
        assert_eq!(at(&tpm), Some(6));
        let schedule = [&tpm[..], &[key("schedule")]].concat();
        assert_eq!(at(&[&schedule[..], &[Seg::Index(0)]].concat()), Some(9));
        assert_eq!(at(&[&schedule[..], &[Seg::Index(1)]].concat()), Some(10));
        assert_eq!(
            at(&[&schedule[..], &[Seg::Index(1), key("burst")]].concat()),
            Some(11)
        );
        assert_eq!(
            at(&[key("entities"), key("key-1"), key("parent")]),
            Some(12)
        );
    }

    #[test]
    fn what_is_not_there_has_no_line() {
        assert_eq!(line_of(DOC, &[key("system")]), None);
        assert_eq!(line_of(DOC, &[key("resources"), key("gpt-5")]), None);
        assert_eq!(line_of(DOC, &[key("namespace"), key("x")]), None);
        assert_eq!(line_of(DOC, &[]), None);
        assert_eq!(line_of(": : :", &[key("a")]), None);
    }

    #[test]
    fn paths_render_as_dotted_text() {
        let path = [key("a"), key("b"), Seg::Index(2), key("c")];
        assert_eq!(render(&path), "a.b[2].c");
    }
}
