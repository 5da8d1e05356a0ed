#pragma once
#include "trainrt/dtype.hpp"
