//! HIP graphs: the device's stream recorded (`hipStreamBeginCapture` in
//! relaxed mode, so the recording thread may still allocate), the recording
//! launched through an executable graph updated in place while the recorded
//! kernels stay the same (`hipGraphExecUpdate`) and instantiated afresh when
//! they change. See [`crate::graph`] for what makes a launch safe.

use super::{RocmDevice, ffi};
use crate::error::Result;
use crate::graph::GraphLaunch;
use rocm_rs::hip::bindings as hb;
use std::any::Any;
use std::ptr::null_mut;

/// A recorded graph, destroyed on drop (a template: launches go through
/// [`HipGraphExec`]).
struct Recorded {
    raw: hb::hipGraph_t,
    api: &'static ffi::HipGraphApi,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // SAFETY: our graph, destroyed once. Errors are ignored.
        unsafe { (self.api.hipGraphDestroy)(self.raw) };
    }
}

/// An executable graph of a ROCm device, destroyed on drop.
struct HipGraphExec {
    raw: hb::hipGraphExec_t,
    api: &'static ffi::HipGraphApi,
}

// SAFETY: an opaque handle into the HIP runtime, which synchronises its use
// from several threads itself (see the module docs of `rocm`, "Threads").
unsafe impl Send for HipGraphExec {}

impl Drop for HipGraphExec {
    fn drop(&mut self) {
        // SAFETY: our executable graph, destroyed once. Errors are ignored.
        unsafe { (self.api.hipGraphExecDestroy)(self.raw) };
    }
}

impl RocmDevice {
    fn graph_api(&self) -> Result<&'static ffi::HipGraphApi> {
        self.graphs
            .ok_or_else(|| crate::error::Error::NotRecordable {
                device: self.label.clone(),
                what: "a recording (this HIP runtime lacks graphs)",
            })
    }

    pub(super) fn begin_recording_raw(&self) -> Result<()> {
        let api = self.graph_api()?;
        self.set_device()?;
        // SAFETY: our stream. Relaxed: the recording thread may allocate
        // (a cache miss) while it records.
        let code = unsafe {
            (api.hipStreamBeginCapture)(
                self.stream.raw,
                hb::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
            )
        };
        self.check(code, "hipStreamBeginCapture")
    }

    /// # Safety
    /// As [`crate::GpuBackend::end_recording`].
    pub(super) unsafe fn end_recording_raw(
        &self,
        exec: &mut Option<Box<dyn Any + Send>>,
        launch: bool,
    ) -> Result<GraphLaunch> {
        let api = self.graph_api()?;
        self.set_device()?;
        let mut raw: hb::hipGraph_t = null_mut();
        // SAFETY: our stream, recording since `begin_recording_raw`.
        let code = unsafe { (api.hipStreamEndCapture)(self.stream.raw, &mut raw) };
        self.check(code, "hipStreamEndCapture")?;
        let recorded = Recorded { raw, api };
        if !launch {
            return Ok(GraphLaunch::Discarded);
        }
        let kept = exec.as_mut().and_then(|e| e.downcast_mut::<HipGraphExec>());
        let updated = kept.is_some_and(|e| {
            let mut node: hb::hipGraphNode_t = null_mut();
            let mut result: hb::hipGraphExecUpdateResult = 0;
            // SAFETY: our executable and recorded graphs; on failure (other
            // kernels, another topology) the executable is instantiated anew.
            let code =
                unsafe { (api.hipGraphExecUpdate)(e.raw, recorded.raw, &mut node, &mut result) };
            code == hb::hipError_t_hipSuccess
                && result == hb::hipGraphExecUpdateResult_hipGraphExecUpdateSuccess
        });
        let how = match updated {
            true => GraphLaunch::Updated,
            false => {
                *exec = None;
                let mut raw: hb::hipGraphExec_t = null_mut();
                // SAFETY: a complete recorded graph; writes one handle.
                let code = unsafe { (api.hipGraphInstantiateWithFlags)(&mut raw, recorded.raw, 0) };
                self.check(code, "hipGraphInstantiateWithFlags")?;
                *exec = Some(Box::new(HipGraphExec { raw, api }));
                GraphLaunch::Instantiated
            }
        };
        let e = exec
            .as_ref()
            .and_then(|e| e.downcast_ref::<HipGraphExec>())
            .expect("kept or instantiated above");
        // SAFETY: our executable graph and stream; the caller's proof that
        // the buffers it names are usable by work queued now.
        let code = unsafe { (api.hipGraphLaunch)(e.raw, self.stream.raw) };
        self.check(code, "hipGraphLaunch")?;
        Ok(how)
    }
}
