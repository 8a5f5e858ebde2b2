"""The external binaries tidecd runs: `tidecd.base.tools`, named here too for the clients and stages that
import it from here (it moved to base so that `config.appset` can run the gotemplate helper)."""

from tidecd.base.tools import MissingTool, binary, cache_dir, data_dir, search_dirs

__all__ = ["MissingTool", "binary", "cache_dir", "data_dir", "search_dirs"]
