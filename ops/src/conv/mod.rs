//! The convolution network's ops: [`convolution`] (`conv1d`, `conv2d`,
//! `conv3d`: stride, padding, dilation, groups; NCHW and channels-last).

pub mod convolution;

pub use convolution::ConvOptions;
