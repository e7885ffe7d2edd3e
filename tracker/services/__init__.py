"""Services: the tracker's use cases. They own transactions and convert ORM rows to schemas."""
