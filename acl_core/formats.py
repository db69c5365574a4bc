"""aclFormat with CANN's numbers, and which formats are plain layouts versus private ones."""

from __future__ import annotations

from enum import IntEnum


class Format(IntEnum):
    """aclFormat (acl_base_rt.h)."""

    ACL_FORMAT_UNDEFINED = -1
    ACL_FORMAT_NCHW = 0
    ACL_FORMAT_NHWC = 1
    ACL_FORMAT_ND = 2
    ACL_FORMAT_NC1HWC0 = 3
    ACL_FORMAT_FRACTAL_Z = 4
    ACL_FORMAT_NC1HWC0_C04 = 12
    ACL_FORMAT_HWCN = 16
    ACL_FORMAT_NDHWC = 27
    ACL_FORMAT_FRACTAL_NZ = 29
    ACL_FORMAT_NCDHW = 30
    ACL_FORMAT_NDC1HWC0 = 32
    ACL_FRACTAL_Z_3D = 33
    ACL_FORMAT_NC = 35
    ACL_FORMAT_NCL = 47
    ACL_FORMAT_FRACTAL_NZ_C0_16 = 50
    ACL_FORMAT_FRACTAL_NZ_C0_32 = 51
    ACL_FORMAT_FRACTAL_NZ_C0_2 = 52
    ACL_FORMAT_FRACTAL_NZ_C0_4 = 53
    ACL_FORMAT_FRACTAL_NZ_C0_8 = 54

    @property
    def is_private(self) -> bool:
        """True for Ascend's tiled storage formats, accepted only where an op says so."""
        return self in PRIVATE_FORMATS


PRIVATE_FORMATS: frozenset[Format] = frozenset(
    {
        Format.ACL_FORMAT_NC1HWC0,
        Format.ACL_FORMAT_FRACTAL_Z,
        Format.ACL_FORMAT_NC1HWC0_C04,
        Format.ACL_FORMAT_FRACTAL_NZ,
        Format.ACL_FORMAT_NDC1HWC0,
        Format.ACL_FRACTAL_Z_3D,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_16,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_32,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_2,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_4,
        Format.ACL_FORMAT_FRACTAL_NZ_C0_8,
    }
)

PLAIN_FORMATS: frozenset[Format] = frozenset(f for f in Format if f not in PRIVATE_FORMATS) - {
    Format.ACL_FORMAT_UNDEFINED
}
"""Formats whose storage is an ordinary strided array: ND and the named semantic layouts."""
