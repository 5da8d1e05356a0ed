"""A DLPack producer for any device, built with ctypes: lets the tests hand the binding a "CUDA
tensor" on a machine without a GPU (its memory is never touched by the paths tested)."""
import ctypes


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeTensor:
    """n float32 elements on DLPack device `device_type` (2 = CUDA) at a fake address. The hostile
    tests say more: any `shape` and `strides` (int64 each), `ndim` (what the tensor claims, whatever
    the shape holds), element `bits`, `byte_offset` and `address` (0: NULL)."""

    def __init__(self, n=16, device_type=2, address=0x7F0000000000, shape=None, strides=None, ndim=None, bits=32,
                 byte_offset=0):
        shape = (n,) if shape is None else tuple(shape)
        self._shape = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(1, len(strides)))(*strides)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = address or None
        t.device = _DLDevice(device_type, 0)
        t.ndim = len(shape) if ndim is None else ndim
        t.dtype = _DLDataType(2, bits, 1)
        t.shape = self._shape
        t.strides = self._strides
        t.byte_offset = byte_offset
        self._managed.deleter = None

    def __dlpack__(self, *args, **kwargs):
        return _new_capsule(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (self._managed.dl_tensor.device.device_type, 0)
