"""The chapters: each folder holds numbered scripts and one importable engine module."""
