//! The answers of recent rechecks of a live-update stream's session or token, shared by all the
//! streams it opened (see `sse`): 5,000 streams of a few holders cost a few database reads a
//! second, not a thousand.

use std::time::Duration;

/// The answers of recent rechecks by session or token, shared by all the streams it opened: an
/// answer serves for [`SharedRechecks::FRESH_FOR`] (at most half the recheck period), so a
/// stream ends at most that much later than its own check would have ended it. Only definite
/// answers are kept (a check the database could not answer is tried again by the next stream).
#[derive(Default)]
pub struct SharedRechecks {
    answers: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, bool)>>,
}

impl SharedRechecks {
    /// How long an answer serves, at most.
    pub const FRESH_FOR: Duration = Duration::from_secs(1);
    /// Answers kept before the stale ones are swept.
    const SWEEP_ABOVE: usize = 1024;

    fn fresh_for(recheck: Duration) -> Duration {
        Self::FRESH_FOR.min(recheck / 2)
    }

    /// The answer for `key`, if one was found within `fresh_for(recheck)`.
    pub fn get(&self, key: &str, recheck: Duration) -> Option<bool> {
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .get(key)
            .filter(|(at, _)| at.elapsed() < Self::fresh_for(recheck))
            .map(|(_, holds)| *holds)
    }

    /// Keeps the answer of a check that started at `asked`, unless one that started later is
    /// kept already (a slow check begun before a revocation must not replace the answer of one
    /// begun after it).
    pub fn put(&self, key: String, holds: bool, asked: std::time::Instant, recheck: Duration) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.len() >= Self::SWEEP_ABOVE {
            let fresh = Self::fresh_for(recheck);
            answers.retain(|_, (at, _)| at.elapsed() < fresh);
        }
        match answers.get(&key) {
            Some((kept, _)) if *kept > asked => {}
            _ => {
                answers.insert(key, (asked, holds));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recheck_answer_serves_the_holders_other_streams_for_half_the_period_at_most() {
        let rechecks = SharedRechecks::default();
        let recheck = Duration::from_millis(40);
        assert_eq!(rechecks.get("token 1", recheck), None);
        let slow_check = std::time::Instant::now();
        rechecks.put("token 1".into(), false, std::time::Instant::now(), recheck);
        assert_eq!(rechecks.get("token 1", recheck), Some(false));
        assert_eq!(rechecks.get("token 2", recheck), None);
        // A check that began earlier and ends later does not replace it.
        rechecks.put("token 1".into(), true, slow_check, recheck);
        assert_eq!(rechecks.get("token 1", recheck), Some(false));
        std::thread::sleep(recheck / 2);
        assert_eq!(
            rechecks.get("token 1", recheck),
            None,
            "a stale answer served"
        );
        // With the default period, an answer serves for a second.
        let period = Duration::from_secs(5);
        rechecks.put("token 1".into(), true, std::time::Instant::now(), period);
        assert_eq!(rechecks.get("token 1", period), Some(true));
    }
}
