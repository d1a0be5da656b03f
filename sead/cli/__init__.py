"""The `sead` console command."""
