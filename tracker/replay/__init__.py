"""``plateau replay``: apply a stopping policy to recorded curves and measure what it saves and costs."""
