"""Static CET leaderboard site builder (see DESIGN.md)."""
