"""Paths as users type them: Windows paths, which mean nothing on the machines msdet runs on,
and URLs, which msdet does not download."""

from __future__ import annotations

import re

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_windows_path(text: str) -> bool:
    """``C:\\data\\set``, ``D:/data``, or a network share ``\\\\server\\share``."""
    return bool(_DRIVE.match(text)) or text.startswith("\\\\")


def windows_path_hint(text: str, setting: str = "") -> str:
    """What to do about ``text`` (given as ``setting``, when named) when it is a Windows
    path; "" when it is not one."""
    if not is_windows_path(str(text)):
        return ""
    return (
        f"{f'{setting}={text}' if setting else text} is a Windows path, which does not exist "
        "on this machine: give its path here (under WSL, C:\\data is /mnt/c/data)"
    )


def is_url(text: str) -> bool:
    """``http://...``, ``rtsp://...``: a scheme before ``://``."""
    return bool(_URL.match(str(text)))
