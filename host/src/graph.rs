//! Recording a GPU's queued work and launching it as one graph (CUDA
//! graphs, HIP graphs): [`Graph`], and the turns the threads that queue
//! work on one device take while a recording runs.
//!
//! A decode step of a language model is a few hundred small launches, and
//! each costs the host microseconds in the driver: the GPU waits for the
//! host between them. Recorded as a graph, the step is one launch; the GPU
//! runs its kernels back to back.
//!
//! What makes a recording safe to launch: [`Graph::run`] records and
//! launches in one call, so the recorded work always names buffers that are
//! live, or that went back to the caching allocator during the recording
//! (reused only by work queued after the launch, in stream order, as
//! always). While a thread records, it has the device's stream to itself:
//! another thread's work on the same device waits for the launch, and the
//! cache keeps every block (emptying it could free memory the recorded work
//! still writes). What cannot be recorded is refused with
//! [`Error::NotRecordable`]: a copy from or to the host, a wait.

use crate::device::Device;
use crate::error::{Error, Result};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// How a recording ended (what [`GpuBackend::end_recording`](crate::GpuBackend::end_recording) did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphLaunch {
    /// Not launched (the recording failed or was abandoned).
    Discarded,
    /// Launched through the executable graph kept from the last recording,
    /// updated with this one's arguments (same kernels, same order).
    Updated,
    /// Launched through a graph instantiated for it (the first recording,
    /// or one whose work differs from the last's).
    Instantiated,
}

/// The counts of a [`Graph`]'s recordings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Recordings launched as a graph.
    pub launched: u64,
    /// Of those, launched by updating the graph kept from the previous one.
    pub updated: u64,
    /// Graphs instantiated (the first recording and each that changed shape).
    pub instantiated: u64,
}

/// Work queued on a GPU, recorded and launched as one graph: on CUDA a CUDA
/// graph, on ROCm a HIP graph. The executable graph is kept between calls
/// and updated with the next recording's arguments when its kernels are the
/// same (`cuGraphExecUpdate`), which costs far less than instantiating one.
///
/// On a device that does not record (the Cpu, the emulator, a GPU whose
/// driver lacks graphs) [`Graph::run`] runs its work as it is queued.
///
/// ```
/// use ferrocm_host::{Device, Graph, WaveSize};
/// let dev = Device::emulator(WaveSize::Wave32);
/// let mut graph = Graph::new(&dev);
/// let x = graph.run(|| dev.upload(&[1.0f32, 2.0]))?; // the emulator runs it at once
/// assert_eq!(x.download()?, [1.0, 2.0]);
/// assert!(!graph.records());
/// assert_eq!(graph.stats().launched, 0);
/// # Ok::<(), ferrocm_host::Error>(())
/// ```
#[derive(Debug)]
pub struct Graph {
    // Before `device`: the executable graph goes before the device can.
    exec: Option<Box<dyn Any + Send>>,
    device: Device,
    stats: GraphStats,
}

impl Graph {
    /// A graph for work on `device` (nothing is recorded until [`Graph::run`]).
    pub fn new(device: &Device) -> Graph {
        Graph {
            device: device.clone(),
            exec: None,
            stats: GraphStats::default(),
        }
    }

    /// Whether [`Graph::run`] records on this device (a GPU whose driver
    /// has graphs), rather than running the work as queued.
    pub fn records(&self) -> bool {
        self.device.gpu().is_some_and(|g| g.records_graphs())
    }

    /// The counts of the recordings so far.
    pub fn stats(&self) -> GraphStats {
        self.stats
    }

    /// Runs `f`, which queues work on the device, with that work recorded
    /// instead of run, then launches the recording as one graph and returns
    /// what `f` returned. The work then runs on the device's stream, in
    /// order with what was queued before and after, as if `f` had queued
    /// it. Meanwhile other threads' work on this device waits for the
    /// launch.
    ///
    /// `f`'s error type is any that holds the host's [`Error`] (an op
    /// library's, a model's).
    ///
    /// # Errors
    /// What `f` returns (nothing is launched then); [`Error::NotRecordable`]
    /// when `f` copies from or to the host or waits; the driver's error when
    /// recording, instantiating or launching fails. The device is usable
    /// after each (and after a panic in `f`), and the work `f` queued has
    /// not run.
    pub fn run<T, E: From<Error>>(
        &mut self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        let Some(gpu) = self.device.gpu().filter(|g| g.records_graphs()) else {
            return f();
        };
        let turns = &self.device.pool().turns;
        let _turn = turns.take();
        if turns.recording() {
            // One recording inside another: the outer one records this work.
            return f();
        }
        gpu.begin_recording()?;
        turns.set_recording(true);
        let mut unwinding = Abandon {
            gpu,
            turns,
            armed: true,
        };
        let out = f();
        unwinding.armed = false;
        // SAFETY: every buffer the recorded work names is live or back in
        // the cache, whose blocks are only reused by work queued after this
        // launch (the recording thread holds the stream until it returns,
        // and the cache frees nothing while it records).
        let how = unsafe { gpu.end_recording(&mut self.exec, out.is_ok()) };
        turns.set_recording(false);
        let out = out?;
        match how? {
            GraphLaunch::Discarded => {}
            GraphLaunch::Updated => {
                self.stats.launched += 1;
                self.stats.updated += 1;
            }
            GraphLaunch::Instantiated => {
                self.stats.launched += 1;
                self.stats.instantiated += 1;
            }
        }
        Ok(out)
    }
}

/// Ends a recording whose closure unwinds (a panic): the stream records
/// nothing more, nothing of it runs, and the cache frees again.
struct Abandon<'a> {
    gpu: &'a dyn crate::GpuBackend,
    turns: &'a StreamTurns,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.armed {
            // SAFETY: nothing is launched.
            let _ = unsafe { self.gpu.end_recording(&mut None, false) };
            self.turns.set_recording(false);
        }
    }
}

impl Device {
    /// [`Error::NotRecordable`] when the current thread is recording this
    /// device's work into a [`Graph`]: `what` (a copy to the host, a wait)
    /// cannot be part of a graph.
    pub(crate) fn refuse_in_recording(&self, what: &'static str) -> Result<()> {
        if self.gpu().is_some() && self.pool().turns.recording_here() {
            return Err(Error::NotRecordable {
                device: self.to_string(),
                what,
            });
        }
        Ok(())
    }

    /// The current thread's turn on this device's stream (None on the host
    /// devices, which have none): held around every call that queues work.
    pub(crate) fn turn(&self) -> Option<Turn<'_>> {
        self.gpu().map(|_| self.pool().turns.take())
    }
}

fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    NUMBER.with(|n| *n)
}

/// Whose turn it is to queue work on a GPU's stream. A thread takes a turn
/// around each call that queues work (re-entrant: the calls nest); a
/// recording thread holds its turn from the start of the recording to the
/// launch, so work from another thread cannot land in its graph.
#[derive(Debug, Default)]
pub(crate) struct StreamTurns {
    state: Mutex<TurnState>,
    free: Condvar,
}

#[derive(Debug, Default)]
struct TurnState {
    /// The thread holding the turn (0: none).
    owner: u64,
    /// How many turns it holds (nested calls).
    depth: u32,
    /// Whether the owner is recording a graph.
    recording: bool,
}

impl StreamTurns {
    pub(crate) const fn new() -> Self {
        Self {
            state: Mutex::new(TurnState {
                owner: 0,
                depth: 0,
                recording: false,
            }),
            free: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no other thread holds the turn, then takes it.
    pub(crate) fn take(&self) -> Turn<'_> {
        let me = thread_number();
        let mut s = self.lock();
        while s.owner != 0 && s.owner != me {
            s = self.free.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.owner = me;
        s.depth += 1;
        Turn { turns: self }
    }

    /// Whether some thread is recording (the cache keeps its blocks then).
    pub(crate) fn recording(&self) -> bool {
        self.lock().recording
    }

    /// Whether the current thread is recording.
    pub(crate) fn recording_here(&self) -> bool {
        let s = self.lock();
        s.recording && s.owner == thread_number()
    }

    fn set_recording(&self, on: bool) {
        self.lock().recording = on;
    }
}

/// A thread's turn on a device's stream, given back on drop.
pub(crate) struct Turn<'a> {
    turns: &'a StreamTurns,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = self.turns.lock();
        s.depth -= 1;
        if s.depth == 0 {
            s.owner = 0;
            self.turns.free.notify_all();
        }
    }
}
