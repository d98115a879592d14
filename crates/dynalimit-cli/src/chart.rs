//! Charts of usage snapshots: a braille line chart per limit and series for the terminal
//! (`usage --plot`), and an SVG file or an HTML page holding it for a report
//! (`usage --chart FILE`).
//!
//! A series is one entity's consumption of one resource in one window size (hourly, daily,
//! monthly), oldest window first. A panel is one limit (counter) with every series that
//! carries it. Overdraw counts (`{limit}#od`) are not charted. Every string drawn comes from
//! the table and is escaped first, as the table output escapes it.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use dynalimit_repository::UsageSnapshot;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};

use crate::output::escape;

/// One series: (entity, resource, window) and its points, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Series {
    pub(crate) entity: String,
    pub(crate) resource: String,
    pub(crate) window: String,
    /// (window start in epoch seconds, whole tokens).
    pub(crate) points: Vec<(i64, i64)>,
}

impl Series {
    /// The points with time in whole hours since the epoch: every window starts on one, so
    /// the time axis's labels fall on window starts.
    fn hourly(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.points.iter().map(|(t, v)| (t.div_euclid(3600), *v))
    }

    fn label(&self) -> String {
        format!(
            "{} on {}, {}",
            escape(&self.entity),
            escape(&self.resource),
            escape(&self.window)
        )
    }
}

/// One limit and every series that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Panel {
    pub(crate) limit: String,
    pub(crate) series: Vec<Series>,
}

/// The panels of `snapshots` (in any order), limits by name, series by entity, resource and
/// window, and the count of snapshots left out because their window start does not read as
/// `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn panels(snapshots: &[UsageSnapshot]) -> (Vec<Panel>, usize) {
    type SeriesKey = (String, String, String);
    let mut by_limit: BTreeMap<&str, BTreeMap<SeriesKey, BTreeMap<i64, i64>>> = BTreeMap::new();
    let mut unreadable = 0;
    for s in snapshots {
        let Ok(start) = s.window_start.parse::<jiff::Timestamp>() else {
            unreadable += 1;
            continue;
        };
        let key = (s.entity_id.clone(), s.resource.clone(), s.window.clone());
        for (limit, tokens) in &s.counters {
            if limit.contains('#') {
                continue;
            }
            by_limit
                .entry(limit)
                .or_default()
                .entry(key.clone())
                .or_default()
                .insert(start.as_second(), *tokens);
        }
    }
    let panels = by_limit
        .into_iter()
        .map(|(limit, series)| Panel {
            limit: limit.to_owned(),
            series: series
                .into_iter()
                .map(|((entity, resource, window), points)| Series {
                    entity,
                    resource,
                    window,
                    points: points.into_iter().collect(),
                })
                .collect(),
        })
        .collect();
    (panels, unreadable)
}

/// The hour range and the value range that hold every point of `series`: never empty, and
/// from zero (or the lowest value below it) to the largest value (at least 1).
fn axes<'a>(series: impl IntoIterator<Item = &'a Series>) -> (Range<i64>, Range<i64>) {
    let (mut first, mut last, mut bottom, mut top) = (i64::MAX, i64::MIN, 0, 1);
    for (hour, value) in series.into_iter().flat_map(Series::hourly) {
        (first, last) = (first.min(hour), last.max(hour));
        (bottom, top) = (bottom.min(value), top.max(value));
    }
    if first > last {
        (first, last) = (0, 0);
    }
    (first..last.max(first + 1), bottom..top)
}

fn drawing(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

fn iso(second: i64) -> String {
    jiff::Timestamp::from_second(second)
        .map(|t| t.strftime("%Y-%m-%dT%H:%MZ").to_string())
        .unwrap_or_else(|_| second.to_string())
}

/// A plotters drawing area of braille cells: each character cell holds 2 × 4 dots, and text
/// takes whole cells. Anything drawn in a colour other than white sets its dots.
struct Braille {
    columns: usize,
    rows: usize,
    /// Per cell, the dots set (bit `n` is dot `n + 1` of the braille pattern).
    dots: Vec<u8>,
    /// Per cell, a character of text drawn there.
    text: Vec<Option<char>>,
}

impl Braille {
    fn new(columns: usize, rows: usize) -> Braille {
        Braille {
            columns,
            rows,
            dots: vec![0; columns * rows],
            text: vec![None; columns * rows],
        }
    }

    fn cell(&self, x: i32, y: i32) -> Option<usize> {
        let (column, row) = (usize::try_from(x / 2).ok()?, usize::try_from(y / 4).ok()?);
        (x >= 0 && y >= 0 && column < self.columns && row < self.rows)
            .then_some(row * self.columns + column)
    }

    /// The lines of the drawing, trailing blanks trimmed.
    fn lines(&self) -> Vec<String> {
        (0..self.rows)
            .map(|row| {
                let line: String = (0..self.columns)
                    .map(|column| {
                        let at = row * self.columns + column;
                        self.text[at].unwrap_or(match self.dots[at] {
                            0 => ' ',
                            dots => char::from_u32(0x2800 + u32::from(dots)).unwrap_or(' '),
                        })
                    })
                    .collect();
                line.trim_end().to_owned()
            })
            .collect()
    }
}

impl DrawingBackend for &mut Braille {
    type ErrorType = std::convert::Infallible;

    fn get_size(&self) -> (u32, u32) {
        let side = |cells: usize, dots: usize| u32::try_from(cells * dots).unwrap_or(u32::MAX);
        (side(self.columns, 2), side(self.rows, 4))
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        Ok(())
    }

    fn draw_pixel(
        &mut self,
        (x, y): BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        if color.alpha < 0.5 || color.rgb == (255, 255, 255) {
            return Ok(());
        }
        if let Some(at) = self.cell(x, y) {
            // Braille dots: 1-3 and 7 down the left column, 4-6 and 8 down the right.
            let bit = match (x % 2, y % 4) {
                (0, 3) => 6,
                (1, 3) => 7,
                (0, row) => row,
                (_, row) => row + 3,
            };
            self.dots[at] |= 1 << bit;
        }
        Ok(())
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        (x, y): BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let width = i32::try_from(text.chars().count() * 2).unwrap_or(i32::MAX);
        let anchor = style.anchor();
        let x = match anchor.h_pos {
            HPos::Left => x,
            HPos::Right => x - width,
            HPos::Center => x - width / 2,
        };
        let y = match anchor.v_pos {
            VPos::Top => y,
            VPos::Center => y - 2,
            VPos::Bottom => y - 4,
        };
        for (i, c) in (0..).zip(text.chars()) {
            if let Some(at) = self.cell(x + 2 * i, y) {
                self.text[at] = Some(c);
            }
        }
        Ok(())
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        _: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        Ok((
            u32::try_from(text.chars().count() * 2).unwrap_or(u32::MAX),
            4,
        ))
    }
}

/// The braille chart of one series, `columns` characters wide.
fn braille_chart(series: &Series, columns: usize) -> Result<Vec<String>, ChartError> {
    let (hours, values) = axes([series]);
    let mut canvas = Braille::new(columns, 16);
    {
        let area = (&mut canvas).into_drawing_area();
        let mut chart = ChartBuilder::on(&area)
            .margin_right(12)
            .x_label_area_size(12)
            .y_label_area_size(20)
            .build_cartesian_2d(hours, values)
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(3)
            .y_labels(3)
            .x_label_formatter(&|h| {
                jiff::Timestamp::from_second(h.saturating_mul(3600))
                    .map(|t| t.strftime("%m-%d %H:%M").to_string())
                    .unwrap_or_default()
            })
            .draw()
            .map_err(drawing)?;
        chart
            .draw_series(LineSeries::new(series.hourly(), BLACK))
            .map_err(drawing)?;
        area.present().map_err(drawing)?;
    }
    Ok(canvas.lines())
}

/// The terminal charts: per panel and series a title, a braille line chart `columns`
/// characters wide (at least 40), and the span of its windows.
pub(crate) fn terminal(panels: &[Panel], columns: usize) -> Result<String, ChartError> {
    let columns = columns.max(40);
    let mut out = String::new();
    for panel in panels {
        for series in &panel.series {
            let (Some(first), Some(last)) = (series.points.first(), series.points.last()) else {
                continue;
            };
            let total: i64 = series
                .points
                .iter()
                .map(|p| p.1)
                .fold(0, i64::saturating_add);
            let peak = series.points.iter().map(|p| p.1).max().unwrap_or(0);
            out.push_str(&format!(
                "{}: {} ({} windows, total {total}, peak {peak})\n",
                escape(&panel.limit),
                series.label(),
                series.points.len()
            ));
            for line in braille_chart(series, columns)? {
                out.push_str(&line);
                out.push('\n');
            }
            out.push_str(&format!("{} to {}\n\n", iso(first.0), iso(last.0)));
        }
    }
    Ok(out)
}

/// What went wrong drawing a chart file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChartError {
    /// FILE names neither `.svg` nor `.html`.
    #[error("--chart {0}: the file name must end in .svg or .html")]
    Kind(String),
    /// Nothing to chart.
    #[error("no usage snapshot with a counter to chart")]
    Empty,
    /// The drawing library refused.
    #[error("drawing the chart: {0}")]
    Draw(String),
}

/// What `--chart FILE` writes, by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Svg,
    Html,
}

impl FileKind {
    /// The kind of `path`, checked before any request.
    pub(crate) fn of(path: &Path) -> Result<FileKind, ChartError> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(FileKind::Svg),
            Some("html" | "htm") => Ok(FileKind::Html),
            _ => Err(ChartError::Kind(path.display().to_string())),
        }
    }
}

/// One SVG document: a chart per panel, stacked, each with a line and a legend entry per
/// series, windows on a time axis.
pub(crate) fn svg(panels: &[Panel]) -> Result<String, ChartError> {
    if panels.is_empty() {
        return Err(ChartError::Empty);
    }
    const PANEL_HEIGHT: u32 = 320;
    let height = PANEL_HEIGHT * u32::try_from(panels.len()).unwrap_or(u32::MAX / PANEL_HEIGHT);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (960, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let areas = root.split_evenly((panels.len(), 1));
        for (area, panel) in areas.iter().zip(panels) {
            let (hours, values) = axes(&panel.series);
            let mut chart = ChartBuilder::on(area)
                .caption(
                    format!("{}: whole tokens per window", escape(&panel.limit)),
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(32)
                .y_label_area_size(64)
                .build_cartesian_2d(hours, values)
                .map_err(drawing)?;
            chart
                .configure_mesh()
                .x_labels(6)
                .x_label_formatter(&|h| iso(h.saturating_mul(3600)))
                .draw()
                .map_err(drawing)?;
            for (i, series) in panel.series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(series.hourly(), color))
                    .map_err(drawing)?
                    .label(series.label())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(drawing)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(out)
}

/// The file `--chart` writes: the SVG, or an HTML page holding it.
pub(crate) fn file(panels: &[Panel], kind: FileKind) -> Result<String, ChartError> {
    let svg = svg(panels)?;
    Ok(match kind {
        FileKind::Svg => svg,
        FileKind::Html => format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
             <title>dynalimit usage</title></head>\n<body>\n{svg}\n</body>\n</html>\n"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(entity: &str, window: &str, start: &str, rpm: i64) -> UsageSnapshot {
        UsageSnapshot {
            entity_id: entity.into(),
            resource: "gpt-4".into(),
            window: window.into(),
            window_start: start.into(),
            counters: [("rpm".to_owned(), rpm), ("rpm#od".to_owned(), 1)].into(),
            total_events: rpm,
        }
    }

    #[test]
    fn series_are_grouped_oldest_first_and_unreadable_starts_are_counted() {
        let (panels, unreadable) = panels(&[
            snapshot("a", "hourly", "2026-11-22T02:00:00Z", 5),
            snapshot("a", "hourly", "2026-11-22T01:00:00Z", 3),
            snapshot("a", "daily", "2026-11-22T00:00:00Z", 8),
            snapshot("b", "hourly", "2026-11-22T01:00:00Z", 9),
            snapshot("b", "hourly", "yesterday", 9),
        ]);
        assert_eq!(unreadable, 1);
        assert_eq!(panels.len(), 1, "the overdraw count is not charted");
        let p = &panels[0];
        assert_eq!(p.limit, "rpm");
        let shape: Vec<(&str, &str, Vec<i64>)> = p
            .series
            .iter()
            .map(|s| {
                (
                    s.entity.as_str(),
                    s.window.as_str(),
                    s.points.iter().map(|x| x.1).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("a", "daily", vec![8]),
                ("a", "hourly", vec![3, 5]),
                ("b", "hourly", vec![9]),
            ]
        );
        assert_eq!(p.series[1].points[1].0 - p.series[1].points[0].0, 3600);
    }

    #[test]
    fn the_terminal_chart_names_each_series_and_escapes_what_the_table_holds() {
        let (drawn, _) = panels(&[
            snapshot("key\u{1b}[31m", "hourly", "2026-11-22T01:00:00Z", 3),
            snapshot("key\u{1b}[31m", "hourly", "2026-11-22T02:00:00Z", 12),
            snapshot("key\u{1b}[31m", "hourly", "2026-11-22T03:00:00Z", 6),
        ]);
        let text = terminal(&drawn, 80).unwrap();
        assert!(
            text.contains("rpm: key\\u{1b}[31m on gpt-4, hourly (3 windows, total 21, peak 12)"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'));
        assert!(text.contains("2026-11-22T01:00Z to 2026-11-22T03:00Z"));
        assert!(
            text.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
            "a drawn line: {text}"
        );
        assert!(
            text.contains("11-22 01:00"),
            "the time axis is labelled: {text}"
        );
        // One window, a constant series, a zero: nothing divides by an empty range.
        let (one, _) = panels(&[snapshot("k", "daily", "2026-11-22T00:00:00Z", 0)]);
        assert!(
            terminal(&one, 0)
                .unwrap()
                .contains("(1 windows, total 0, peak 0)")
        );
    }

    #[test]
    fn the_svg_has_a_line_and_a_legend_per_series_and_html_holds_it() {
        let (drawn, _) = panels(&[
            snapshot("a", "hourly", "2026-11-22T01:00:00Z", 3),
            snapshot("a", "hourly", "2026-11-22T02:00:00Z", 5),
            snapshot("<b>&", "hourly", "2026-11-22T01:00:00Z", 9),
        ]);
        let svg = file(&drawn, FileKind::Svg).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        let coloured = svg
            .match_indices("<polyline")
            .filter(|(at, _)| !svg[*at..].split('>').next().unwrap().contains("#000000"))
            .count();
        assert_eq!(coloured, 2 + 2, "two lines, two legend marks");
        assert!(svg.contains("&lt;b&gt;&amp; on gpt-4, hourly"));
        assert!(svg.contains("rpm: whole tokens per window"));
        assert!(
            svg.contains(">\n2026-11-22T01:00Z"),
            "whole hours on the time axis"
        );
        assert!(!svg.contains(":13Z"));
        let html = file(&drawn, FileKind::Html).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>") && html.contains(&svg));
        assert!(matches!(svg_empty(), Err(ChartError::Empty)));
    }

    fn svg_empty() -> Result<String, ChartError> {
        svg(&[])
    }

    #[test]
    fn the_file_kind_comes_from_the_extension() {
        assert_eq!(FileKind::of(Path::new("a/u.svg")).unwrap(), FileKind::Svg);
        assert_eq!(FileKind::of(Path::new("u.HTML")).unwrap(), FileKind::Html);
        for bad in ["u.png", "u", "svg"] {
            assert!(matches!(
                FileKind::of(Path::new(bad)),
                Err(ChartError::Kind(_))
            ));
        }
    }
}
