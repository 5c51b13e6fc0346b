//! The `scheduler.kalypso.io/v1alpha1` API: the objects a platform team writes in its
//! control-plane repository, and the ones the scheduler derives from them.
