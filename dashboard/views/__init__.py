"""The dashboard's pages, one script each (Streamlit runs them through st.navigation)."""
