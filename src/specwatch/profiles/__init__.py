"""Server profiles (TOML) and their schema: what to boot and how."""
