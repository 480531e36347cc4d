"""Static CET leaderboard site builder (see ARCHITECTURE.md)."""
