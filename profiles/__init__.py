"""Package data: model specs (``models/*.yaml``) and device profiles (``devices/*.yaml``)."""
