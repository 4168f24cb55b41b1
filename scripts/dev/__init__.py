"""Development tools: ``compile_times.py`` (compile and cache times, no GPU needed),
``profile_host.py`` (the host side of a call) and ``ab_trees.py`` (two source trees side by side)."""
