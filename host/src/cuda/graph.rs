//! CUDA graphs: the device's stream recorded (`cuStreamBeginCapture` in
//! relaxed mode, so the recording thread may still allocate), the recording
//! launched through an executable graph that is updated in place while the
//! recorded kernels stay the same (`cuGraphExecUpdate`) and instantiated
//! afresh when they change. See [`crate::graph`] for what makes a launch
//! safe.

use super::CudaDevice;
use super::driver::Handle;
use crate::error::Result;
use crate::graph::GraphLaunch;
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use std::any::Any;

/// A recorded graph, destroyed on drop (it is only a template: launches go
/// through [`CudaGraphExec`]).
struct Recorded(sys::CUgraph);

impl Drop for Recorded {
    fn drop(&mut self) {
        // SAFETY: our graph, destroyed once.
        let _ = unsafe { cu::graph::destroy(self.0) };
    }
}

/// An executable graph of a CUDA device, destroyed on drop.
pub(super) struct CudaGraphExec {
    exec: sys::CUgraphExec,
    ctx: Handle<sys::CUcontext>,
}

// SAFETY: a graph executable may be launched and destroyed from any thread
// once its context is current (each use sets it).
unsafe impl Send for CudaGraphExec {}

impl Drop for CudaGraphExec {
    fn drop(&mut self) {
        // SAFETY: our executable graph, in its context; destroying it waits
        // for nothing (a launch in flight keeps what it needs).
        unsafe {
            let _ = cu::ctx::set_current(self.ctx.0);
            let _ = cu::graph::exec_destroy(self.exec);
        }
    }
}

impl CudaDevice {
    pub(super) fn begin_recording_raw(&self) -> Result<()> {
        self.current()?;
        // SAFETY: our stream. Relaxed: the recording thread may allocate
        // (a cache miss) while it records.
        self.check(
            unsafe {
                cu::stream::begin_capture(
                    self.stream.0,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            },
            "cuStreamBeginCapture",
        )
    }

    /// # Safety
    /// As [`crate::GpuBackend::end_recording`].
    pub(super) unsafe fn end_recording_raw(
        &self,
        exec: &mut Option<Box<dyn Any + Send>>,
        launch: bool,
    ) -> Result<GraphLaunch> {
        self.current()?;
        // SAFETY: our stream, recording since `begin_recording_raw`.
        let recorded = Recorded(self.check(
            unsafe { cu::stream::end_capture(self.stream.0) },
            "cuStreamEndCapture",
        )?);
        if !launch {
            return Ok(GraphLaunch::Discarded);
        }
        let kept = exec
            .as_mut()
            .and_then(|e| e.downcast_mut::<CudaGraphExec>());
        let updated = kept.is_some_and(|e| {
            let mut info = std::mem::MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
            // SAFETY: our executable and recorded graphs; on failure (other
            // kernels, another topology) the executable is instantiated anew.
            let r = unsafe { sys::cuGraphExecUpdate_v2(e.exec, recorded.0, info.as_mut_ptr()) };
            r == sys::CUresult::CUDA_SUCCESS
        });
        let how = match updated {
            true => GraphLaunch::Updated,
            false => {
                *exec = None;
                // SAFETY: a complete recorded graph.
                let e = self.check(
                    unsafe { cu::graph::instantiate(recorded.0, sys::CUgraphInstantiate_flags(0)) },
                    "cuGraphInstantiateWithFlags",
                )?;
                *exec = Some(Box::new(CudaGraphExec {
                    exec: e,
                    ctx: self.ctx,
                }));
                GraphLaunch::Instantiated
            }
        };
        let e = exec
            .as_ref()
            .and_then(|e| e.downcast_ref::<CudaGraphExec>())
            .expect("kept or instantiated above");
        // SAFETY: our executable graph and stream; the caller's proof that
        // the buffers it names are usable by work queued now.
        self.check(
            unsafe { cu::graph::launch(e.exec, self.stream.0) },
            "cuGraphLaunch",
        )?;
        Ok(how)
    }
}
