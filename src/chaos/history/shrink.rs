//! Shrinking a failing history: the steps are left out, in chunks and then one by one, while the
//! history still fails (Zeller's delta debugging, "ddmin"), so that the report ends with a replay
//! of a few steps instead of hundreds.

/// The shortest subsequence of `steps` found for which `fails` holds (`fails(steps)` is assumed).
/// Each call of `fails` is a whole run; it is called O(n log n) times at worst for n steps.
pub fn shrink<T: Clone>(steps: Vec<T>, mut fails: impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut current = steps;
    let mut chunks = 2usize;
    while current.len() >= 2 {
        let size = current.len().div_ceil(chunks);
        let mut reduced = false;
        for start in (0..current.len()).step_by(size) {
            // The complement of one chunk: everything but current[start..start + size].
            let candidate: Vec<T> = current[..start]
                .iter()
                .chain(current[(start + size).min(current.len())..].iter())
                .cloned()
                .collect();
            if !candidate.is_empty() && fails(&candidate) {
                current = candidate;
                chunks = (chunks - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if chunks >= current.len() {
                break;
            }
            chunks = (chunks * 2).min(current.len());
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::shrink;

    #[test]
    fn a_failure_that_needs_two_steps_shrinks_to_those_two() {
        let steps: Vec<u32> = (0..100).collect();
        let mut runs = 0;
        let kept = shrink(steps, |s| {
            runs += 1;
            s.contains(&17) && s.contains(&83)
        });
        assert_eq!(kept, vec![17, 83]);
        assert!(runs < 100, "{runs} runs");
    }

    #[test]
    fn a_failure_of_one_step_shrinks_to_it() {
        let kept = shrink((0..37).collect::<Vec<u32>>(), |s| s.contains(&36));
        assert_eq!(kept, vec![36]);
    }
}
