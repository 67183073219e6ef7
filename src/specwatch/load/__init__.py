"""Load: the HTTP client, workloads and measuring them on live servers."""
