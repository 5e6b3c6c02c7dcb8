// GP_HOST_DEVICE: functions the CPU and CUDA kernels share (random.h,
// rows.h) are compiled for both the host and the device.
#ifndef GPIPE_RUNTIME_HOST_DEVICE_H
#define GPIPE_RUNTIME_HOST_DEVICE_H

#ifdef __CUDACC__
#define GP_HOST_DEVICE __host__ __device__
#else
#define GP_HOST_DEVICE
#endif

#endif // GPIPE_RUNTIME_HOST_DEVICE_H
