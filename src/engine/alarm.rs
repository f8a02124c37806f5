//! Precise wake-ups: one thread of the process sleeps until the earliest instant any task asked
//! for and wakes that task, within tens of microseconds.
//!
//! The runtime's own timer fires on whole milliseconds, and a millisecond or more later still when
//! its workers are busy polling other tasks; jobs claimed ahead of their due time must start
//! within a fraction of a millisecond after it (see `DbClock::wait_until`). The thread's sleep is
//! a futex wait with a timeout, which the kernel ends on its high-resolution timer, whatever the
//! runtime is doing. A woken task still needs a runtime worker to poll it, which is the only hop
//! left.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::Instant;

use tokio::sync::oneshot;

/// An instant asked for, and the task to wake at it (the sequence number keeps equal instants
/// apart; a dropped receiver means the task no longer waits).
type Alarm = (Reverse<(Instant, u64)>, AlarmTx);

struct AlarmTx(oneshot::Sender<()>);

impl PartialEq for AlarmTx {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for AlarmTx {}
impl PartialOrd for AlarmTx {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for AlarmTx {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

fn alarms() -> &'static mpsc::Sender<(Instant, oneshot::Sender<()>)> {
    static ALARMS: OnceLock<mpsc::Sender<(Instant, oneshot::Sender<()>)>> = OnceLock::new();
    ALARMS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("kickoff-alarm".into())
            .spawn(move || {
                without_timer_slack();
                real_time_if_allowed();
                ring(rx)
            })
            .expect("starting the alarm thread");
        tx
    })
}

/// The kernel lets a timed wait of a normal thread end up to 50 µs late (its timer slack, to
/// batch wake-ups); the alarm thread asks for none. Best effort: where `/proc` does not allow it
/// the wait is only that much later.
fn without_timer_slack() {
    // `/proc/<thread id>/timerslack_ns`; the thread's id is the last part of `/proc/thread-self`.
    let written = std::fs::read_link("/proc/thread-self").and_then(|link| {
        let tid = link.file_name().ok_or(std::io::ErrorKind::NotFound)?;
        std::fs::write(
            std::path::Path::new("/proc")
                .join(tid)
                .join("timerslack_ns"),
            "1",
        )
    });
    if let Err(e) = written {
        tracing::debug!(error = %e, "the alarm thread keeps the default timer slack");
    }
}

/// Where the process may (root, or the `CAP_SYS_NICE` capability), the alarm thread takes the
/// lowest real-time priority: woken, it runs at once. A normal thread woken on a core where a
/// database backend runs waits for that backend's slice to end, a core idle beside it or not
/// (`perf sched timehist` of `kickoff bench scheduled`: the alarm thread runnable for 3.0 and
/// 3.3 ms behind PostgreSQL backends, once while the other core sat idle for 2.4 ms). The thread
/// sleeps almost always and never spins, so it takes nothing from the others. Elsewhere it stays
/// a normal thread (the final stretch of each wait still absorbs its usual lateness).
fn real_time_if_allowed() {
    use thread_priority::unix::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadSchedulePolicy,
    };
    let fifo = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo);
    match set_thread_priority_and_policy(
        thread_native_id(),
        thread_priority::ThreadPriority::Min,
        fifo,
    ) {
        Ok(()) => tracing::debug!("the alarm thread runs at real-time priority"),
        Err(e) => tracing::debug!(error = ?e, "the alarm thread keeps the normal policy"),
    }
}

/// The alarm thread: waits for the earliest instant or a new request, whichever comes first.
fn ring(rx: mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    let mut pending: BinaryHeap<Alarm> = BinaryHeap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        while pending
            .peek()
            .is_some_and(|(Reverse((at, _)), _)| *at <= now)
        {
            if let Some((_, AlarmTx(tx))) = pending.pop() {
                let _ = tx.send(());
            }
        }
        let next = match pending.peek() {
            Some((Reverse((at, _)), _)) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, tx)) => {
                seq += 1;
                pending.push((Reverse((at, seq)), AlarmTx(tx)));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sleeps until `at` (never wakes before it), within tens of microseconds after it.
pub async fn sleep_until(at: Instant) {
    if at <= Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    if alarms().send((at, tx)).is_err() {
        // The thread is gone (it never stops while the process runs): the runtime's timer.
        tokio::time::sleep_until(at.into()).await;
        return;
    }
    if rx.await.is_err() {
        tokio::time::sleep_until(at.into()).await;
    }
}
