"""Plateau dashboard (Streamlit, over the tracker's HTTP API). Its pages arrive with the dashboard issue."""
