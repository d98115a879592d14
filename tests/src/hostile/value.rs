//! Attribute values another writer may store: every DynamoDB type, numbers at the edges of
//! what DynamoDB and `i64` hold, times far from now, strings with control and
//! bidirectional-override characters, and strings of every size an item can carry.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;

use super::T0;

/// The decimal text of numbers at the edges: zero and signs, `i64` and `u32` limits and one
/// past them, DynamoDB's largest and smallest magnitudes, 38 significant digits, fractions,
/// exponents, shard counts around the bound of 32. Some are outside what DynamoDB stores
/// (the store refuses those, as DynamoDB does).
pub const EXTREME_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "31",
    "32",
    "33",
    "64",
    "1000",
    "4294967295",
    "4294967296",
    "2147483647",
    "-2147483648",
    "9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1e15",
    "1e16",
    "1E18",
    "9e18",
    "1e38",
    "-1e38",
    "9.9999999999999999999999999999999999999E+125",
    "-9.9999999999999999999999999999999999999E+125",
    "1E-130",
    "12345678901234567890123456789012345678",
    "-12345678901234567890123456789012345678",
    "0.5",
    "-0.5",
    "1.0000000000000000000000000000000000001",
    "12.0",
    "1.2E1",
    "0.000000000000000000000000000000000001",
    "1e126",
    "NaN",
    "Infinity",
    "-Infinity",
    "0x10",
    "1_000",
    " 1",
    "",
];

/// Millisecond instants around [`T0`] and far from it: the past, the epoch, just ahead of
/// now, the stamp lifetime (a minute) and past it, a day, centuries, and the ends of `i64`.
pub fn instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(-1),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MAX - 1),
        Just(i64::MIN + 1),
        Just(-T0),
        (1i64..=120_000).prop_map(|d| T0 + d),
        (1i64..=120_000).prop_map(|d| T0 - d),
        (86_400_000i64..=10_000_000_000_000).prop_map(|d| T0 + d),
        (1i64..=T0).prop_map(|d| T0 - d),
        (0i64..=1_000).prop_map(|d| i64::MAX - d),
        Just(9_000_000_000_000_000_000),
        Just(T0 * 1000),
    ]
}

/// The text of a number: an extreme one, an instant, any `i64`, or a decimal with many digits.
pub fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(EXTREME_NUMBERS).prop_map(str::to_owned),
        2 => instant().prop_map(|t| t.to_string()),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => (1usize..=40, any::<bool>()).prop_map(|(digits, neg)| {
            let mut text = if neg { "-".to_owned() } else { String::new() };
            text.push_str(&"9".repeat(digits));
            text
        }),
        1 => (1usize..=38, 1usize..=38).prop_map(|(int, frac)| {
            format!("{}.{}", "7".repeat(int), "3".repeat(frac))
        }),
    ]
}

/// Strings a writer may store: empty, number-like, control and bidirectional-override
/// characters, escapes a JSON reader must handle, non-ASCII text, key separators, and sizes
/// up to a large part of DynamoDB's 400 KB item.
pub fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(&[
            "",
            " ",
            "-",
            "#",
            "/",
            "_default_",
            "true",
            "false",
            "bypass",
            "BYPASS",
            "null",
            "NaN",
            "1e38",
            "9223372036854775807",
            "\u{0}",
            "\u{1b}[2J\u{1b}[31mred",
            "line\nbreak\rreturn\ttab",
            "\u{202e}reversed\u{202c}",
            "\u{2066}isolate\u{2069}",
            "\u{7f}\u{85}\u{9b}",
            "quote\"back\\slash",
            "\\u0000",
            "日本語テキスト",
            "😀🚀",
            "a#b#c#d",
            "x/y/z",
            "1h9-17s500",
            "h9-17s500",
            "Europe/Nowhere",
            "2023-11-14T22:00:00Z",
            "9999-99-99T99:99:99Z",
        ])
        .prop_map(str::to_owned),
        2 => "[ -~]{0,40}",
        1 => "\\PC{0,20}",
        1 => (0usize..=4).prop_map(|k| "é".repeat([1_000, 10_000, 60_000, 100_000, 150_000][k] / 2)),
    ]
}

/// A value of any DynamoDB type, scalar or nested (two levels), sets included.
pub fn value() -> impl Strategy<Value = AttributeValue> {
    let leaf = prop_oneof![
        4 => number_text().prop_map(AttributeValue::N),
        3 => string().prop_map(AttributeValue::S),
        1 => any::<bool>().prop_map(AttributeValue::Bool),
        1 => Just(AttributeValue::Null(true)),
        1 => proptest::collection::vec(any::<u8>(), 0..16).prop_map(|b| AttributeValue::B(Blob::new(b))),
        1 => proptest::collection::vec(string(), 0..4).prop_map(AttributeValue::Ss),
        1 => proptest::collection::vec(number_text(), 0..4).prop_map(AttributeValue::Ns),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
            proptest::collection::vec(("[a-z_#]{0,8}", inner), 0..4).prop_map(|pairs| {
                AttributeValue::M(pairs.into_iter().collect::<HashMap<_, _>>())
            }),
        ]
    })
}

/// Retypes `value` as `kind`, keeping what can be kept (a number's text as a string, a
/// string as the one member of a list, ...).
pub fn retype(value: &AttributeValue, kind: Kind) -> AttributeValue {
    let text = match value {
        AttributeValue::N(t) | AttributeValue::S(t) => t.clone(),
        AttributeValue::Bool(b) => b.to_string(),
        _ => "1".to_owned(),
    };
    match kind {
        Kind::N => AttributeValue::N(text),
        Kind::S => AttributeValue::S(text),
        Kind::Bool => AttributeValue::Bool(!matches!(value, AttributeValue::Bool(true))),
        Kind::Null => AttributeValue::Null(true),
        Kind::L => AttributeValue::L(vec![value.clone()]),
        Kind::M => AttributeValue::M(HashMap::from([(text, value.clone())])),
        Kind::Ss => AttributeValue::Ss(vec![text]),
        Kind::Ns => AttributeValue::Ns(vec![text]),
        Kind::B => AttributeValue::B(Blob::new(text.into_bytes())),
    }
}

/// A DynamoDB attribute type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Number.
    N,
    /// String.
    S,
    /// Boolean.
    Bool,
    /// Null.
    Null,
    /// List.
    L,
    /// Map.
    M,
    /// String set.
    Ss,
    /// Number set.
    Ns,
    /// Binary.
    B,
}

impl Arbitrary for Kind {
    type Parameters = ();
    type Strategy = BoxedStrategy<Kind>;

    fn arbitrary_with((): ()) -> Self::Strategy {
        proptest::sample::select(&[
            Kind::N,
            Kind::S,
            Kind::Bool,
            Kind::Null,
            Kind::L,
            Kind::M,
            Kind::Ss,
            Kind::Ns,
            Kind::B,
        ])
        .boxed()
    }
}
