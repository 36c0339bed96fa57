"""@PACKAGE@: the @FAMILY@/@VARIANT@ kernel exported by kplay, built ahead of time.

    pip install --no-build-isolation .     # needs torch installed first
    python -m pytest tests
"""

from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, @EXTENSION@

NS = "@PACKAGE@"  # the op library's name: torch.ops.@PACKAGE@
CSRC = Path(__file__).resolve().parent / "@PACKAGE@" / "csrc"  # the sources and the headers they include

setup(
    name="@PACKAGE@",
    version="0.1.0",
    packages=["@PACKAGE@"],
    package_data={"@PACKAGE@": @DATA@},
    ext_modules=[
        @EXTENSION@(
            "@PACKAGE@._ops",
            @SOURCES@,
            define_macros=[("KPLAY_NS", NS)],
            # csrc: kplay/stable.h and the family's own headers (task.toml's includes). Then the NVIDIA
            # libraries the variant names (task.toml's libraries): the copy torch loaded, found on the
            # machine that exported this package; export again on another machine.
            include_dirs=@INCLUDES@,
            extra_compile_args={"cxx": @CFLAGS@, "nvcc": @NVCCFLAGS@},
            extra_link_args=@LDFLAGS@,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
