//! The rollup sums of this process's own commits, held in memory until the fold
//! takes them (see [`super::fold`]).
//!
//! Reading committed events back to fold them is dear: every row and its tags are
//! loaded, copied and aggregated again (about a third of the server's CPU under batch
//! ingest in a profile, issue #25). The writer has aggregated them
//! already, so it hands over each commit's sums with its range of commit numbers, and
//! the fold adds the sums of the commits that follow its mark without a gap.
//!
//! Why this stays exactly once: a commit's numbers `first..=last` belong to it alone
//! (taken under the `clock` row lock), and the events stamped with them are exactly
//! its inserted events, whose sums these are. A run of entries with no gap from the
//! mark therefore covers every event between the mark and its end, and the fold
//! writes their sums under the same mark check as a page read from the database. A
//! gap (another instance's commit, a commit whose outcome this process never
//! learnt, an entry dropped) sends the fold back to the database from the mark;
//! entries the mark has passed are forgotten.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::cost_events::{self, NewCostEvent};
use super::rollups::{self, Partial};
use super::trace_spans::{self, Spans};

/// What the fold adds for a set of committed events: their rollup sums and the
/// spans of their traces.
#[derive(Debug, Default)]
pub struct FoldSums {
    pub rollups: Partial,
    pub spans: Spans,
}

impl FoldSums {
    /// The sums of `events` (each with all of its tags, as the commit indexes them).
    pub fn of<'a, I>(events: I) -> Self
    where
        I: IntoIterator<Item = &'a NewCostEvent>,
        I::IntoIter: Clone,
    {
        let events = events.into_iter();
        let rollups = cost_events::partial_of(events.clone());
        let mut spans = Spans::new();
        trace_spans::add_events(&mut spans, events.map(|e| &e.row));
        Self { rollups, spans }
    }

    /// Adds `other` into these sums.
    pub fn merge(&mut self, other: FoldSums) {
        rollups::merge(&mut self.rollups, other.rollups);
        trace_spans::merge(&mut self.spans, other.spans);
    }
}

/// Entries kept at most; past it the oldest are dropped (the fold then reads those
/// events from the database). Only reached while the fold cannot write.
const MAX_ENTRIES: usize = 4_096;

/// One commit's sums: the numbers it took and the sums of the events it inserted.
#[derive(Debug)]
struct Committed {
    first: i64,
    last: i64,
    sums: FoldSums,
}

/// The commits of this process not folded yet, in commit order.
#[derive(Debug, Default)]
pub struct CommittedSums(Mutex<VecDeque<Committed>>);

/// Sums taken for the numbers after a mark, up to `last`.
pub struct Run {
    pub last: i64,
    pub sums: FoldSums,
    /// Commit numbers covered (an upper bound of the events: duplicates take a number
    /// but insert nothing).
    pub numbers: u64,
}

impl CommittedSums {
    /// Records a commit that took the numbers `first..=last` (none when `last <
    /// first`) and inserted events whose sums are `sums`.
    pub fn push(&self, first: i64, last: i64, sums: FoldSums) {
        if last < first {
            return;
        }
        let mut q = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= MAX_ENTRIES {
            q.pop_front();
        }
        q.push_back(Committed { first, last, sums });
    }

    /// Takes the entries that follow `mark` without a gap, about `max` numbers at most
    /// (a whole entry always), merged; forgets those the mark has passed. `None` when
    /// the number after the mark is not held here.
    pub fn take_after(&self, mark: i64, max: u64) -> Option<Run> {
        let mut q = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while q.front().is_some_and(|c| c.first <= mark) {
            q.pop_front();
        }
        let mut run: Option<Run> = None;
        while let Some(next) = q.front() {
            let expected = run.as_ref().map_or(mark, |r| r.last) + 1;
            if next.first != expected || run.as_ref().is_some_and(|r| r.numbers >= max) {
                break;
            }
            let Some(c) = q.pop_front() else { break };
            let numbers = u64::try_from(c.last - c.first + 1).unwrap_or(0);
            match run.as_mut() {
                None => run = Some(Run { last: c.last, sums: c.sums, numbers }),
                Some(r) => {
                    r.sums.merge(c.sums);
                    r.last = c.last;
                    r.numbers += numbers;
                }
            }
        }
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums() -> FoldSums {
        FoldSums::default()
    }

    #[test]
    fn a_run_starts_right_after_the_mark_and_stops_at_a_gap() {
        let held = CommittedSums::default();
        held.push(1, 10, sums());
        held.push(11, 15, sums());
        held.push(20, 30, sums());
        let run = held.take_after(0, 1_000).expect("run");
        assert_eq!((run.last, run.numbers), (15, 15));
        // 16..=19 is someone else's: nothing until the mark passes it.
        assert!(held.take_after(15, 1_000).is_none());
        let run = held.take_after(19, 1_000).expect("run");
        assert_eq!((run.last, run.numbers), (30, 11));
    }

    #[test]
    fn entries_the_mark_passed_are_forgotten() {
        let held = CommittedSums::default();
        held.push(1, 10, sums());
        held.push(11, 20, sums());
        // Folded from the database up to 10 meanwhile.
        let run = held.take_after(10, 1_000).expect("run");
        assert_eq!(run.last, 20);
        // A mark inside an entry (a page ended mid-commit): that entry is not used.
        held.push(21, 30, sums());
        assert!(held.take_after(25, 1_000).is_none());
    }

    #[test]
    fn a_run_is_bounded_by_whole_entries() {
        let held = CommittedSums::default();
        held.push(1, 10, sums());
        held.push(11, 20, sums());
        let run = held.take_after(0, 5).expect("run");
        assert_eq!(run.last, 10);
        assert_eq!(held.take_after(10, 5).expect("run").last, 20);
    }

    #[test]
    fn a_commit_without_numbers_is_not_held() {
        let held = CommittedSums::default();
        held.push(5, 4, sums());
        assert!(held.take_after(4, 10).is_none());
    }
}
