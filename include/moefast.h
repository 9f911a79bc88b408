/* moefast.h — the whole public API of the moefast inference engine:
 * moefast/engine.h (models, tokenizer, contexts and batches, sessions,
 * sampling, chat) and moefast/lab.h (flags, profile, ceiling, traces and the
 * gate, gen, quantize, bandwidth) and moefast/shard.h (one model over
 * several processes). */
#ifndef MOEFAST_H
#define MOEFAST_H

#include "moefast/engine.h"
#include "moefast/lab.h"
#include "moefast/shard.h"

#endif
